"""Hostile records: what a relaunch, `status`, `verify` and recheck.py read back is checked before it is
believed, and signatures are made by a maintained library. What each group of cases guards against:

  signing         a passphrase-protected key taken for a damaged one; an allowed_signers file read to its
                  first key only; a traceback from `recheck.py --signer` on a folder or a missing file
  cut records     a cut search's record claiming a success with no prompt committed as not_memorized with
                  0 steps; a traceback (exit 1) on a record that is not an object
  run records     a lock with "pid": true held for a live scan forever; a search_stop.json, recall.json or
                  audit_plan.json of the wrong shape believed (or crashing status and report)
  budget          --search-budget of 401 digits: an OverflowError in steps, an infinite budget in seconds
  bundle          a doc_id holding a newline forging a MATCH line; a symbolic link loop crashing verify
                  and recheck.py; a model folder's link to a file elsewhere hashed and its digest printed;
                  model.json with "files": [] matching any model; recheck.py without --expect silent

Two small scans are shared by every case (one document settled by its certificates, exported as a bundle;
three documents whose search a 1 ms budget cuts); each case damages a copy."""

from __future__ import annotations

import json
import random
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from clirun import cli

from scanner.cli.demo import demo_corpus
from scanner.results import recheck as script
from scanner.results.bundle import MANIFEST, SIGNATURE, sha256_bytes
from scanner.results.signing import ed25519_sign, sign_manifest
from scanner.results.verify import published_problems
from scanner.schema import RESULTS_WALL_CLOCK
from scanner.studies.tiny import CANARIES, salad

FORGED_ID = "doc-0\nMATCH forged-doc span-0: 12/12 tokens\r\t"
SCAN = [
    "--span-tokens",
    "12",
    "--stride",
    "2",
    "--context-tokens",
    "16",
    "--min-match-rate",
    "0.8",
    "--max-candidates",
    "0",
    "--calibration-prompts",
    "0",
    "--extend-tokens",
    "0",
    "--search-budget",
    "auto",
]
# Searches kept small (2 steps of 8 candidates a length): a relaunch redoes a cut unit in seconds.
CARDS = [
    "--span-tokens",
    "12",
    "--stride",
    "6",
    "--context-tokens",
    "16",
    "--min-match-rate",
    "0.8",
    "--steps",
    "2",
    "--candidates",
    "8",
    "--top-k",
    "8",
    "--restarts",
    "0",
    "--calibration-prompts",
    "0",
    "--extend-tokens",
    "0",
    "--unit-size",
    "2",
    "--max-candidates",
    "2",
    "--audit-sample",
    "0",
]
KEYGEN = shutil.which("ssh-keygen")
needs_keygen = pytest.mark.skipif(KEYGEN is None, reason="ssh-keygen is not installed")


def recheck(bundle: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-I", str(bundle / "recheck.py"), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=600,
    )


def assert_clean(result, code: int, *words: str) -> str:
    """The exit code, the words, no traceback; what was printed."""
    out = result.stdout + result.stderr
    assert result.returncode == code, (result.returncode, out[-3000:])
    assert "Traceback" not in out and "internal error" not in out, out[-3000:]
    for word in words:
        assert word in out, (word, out[-3000:])
    return out


def keygen(path: Path, passphrase: str = "") -> Path:
    subprocess.run(
        [KEYGEN, "-q", "-t", "ed25519", "-N", passphrase, "-C", path.name, "-f", str(path)], check=True
    )
    return path


@pytest.fixture(scope="module")
def scanned(tiny_dir, tmp_path_factory):
    """(root, run, bundle): demo doc-0 under an id holding a newline, settled by its certificates."""
    root = tmp_path_factory.mktemp("records")
    row = pq.read_table(demo_corpus(root / "demo.parquet")).slice(0, 1).to_pylist()[0]
    corpus = root / "forged.parquet"
    pq.write_table(pa.table({"id": [FORGED_ID], "text": [row["text"]]}), corpus)
    run, bundle = root / "run", root / "bundle"
    assert_clean(cli("scan", corpus, "--model", tiny_dir, "--out", run, *SCAN), 0)
    assert_clean(cli("export", run, "--bundle", bundle), 0)
    return root, run, bundle


@pytest.fixture(scope="module")
def cut_run(tiny_dir, tmp_path_factory):
    """(corpus, run) whose one search unit a 1 ms budget cut: its stats hold a "cut" record per span."""
    root = tmp_path_factory.mktemp("cut")
    rng = random.Random(5)
    texts = [f"{salad(rng, 5)} {canary} {salad(rng, 5)}" for canary in CANARIES[:3]]
    corpus = root / "corpus.parquet"
    pq.write_table(pa.table({"id": [f"d{i}" for i in range(3)], "text": texts}), corpus)
    run = root / "run"
    assert_clean(
        cli("scan", corpus, "--model", tiny_dir, "--out", run, *CARDS, "--search-budget", "0.001s"), 0
    )
    stats = json.loads((run / "search" / "stats" / "00000.json").read_text())
    assert len(stats["cut"]) == 2, stats
    return corpus, run


# --- signing through cryptography: passphrase keys, allowed_signers, --signer errors ----------------------


@needs_keygen
def test_a_passphrase_protected_key_signs_what_ssh_keygen_verifies(scanned, tmp_path, monkeypatch):
    """The key must not be called damaged, nor refused as encrypted: the passphrase unlocks it."""
    _, run, _ = scanned
    key = keygen(tmp_path / "signer", "correct horse")
    bundle = tmp_path / "signed"
    monkeypatch.setenv("ACR_SIGN_PASSPHRASE", "correct horse")
    assert_clean(cli("export", run, "--bundle", bundle, "--sign", key), 0, "signed")
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(f"me@example {Path(str(key) + '.pub').read_text()}")
    with open(bundle / MANIFEST, "rb") as manifest:
        checked = subprocess.run(
            [
                KEYGEN,
                "-Y",
                "verify",
                "-f",
                str(allowed),
                "-I",
                "me@example",
                "-n",
                "acr-scanner-bundle",
                "-s",
                str(bundle / SIGNATURE),
            ],
            stdin=manifest,
            capture_output=True,
            text=True,
        )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert published_problems(bundle, None, str(key) + ".pub") == []


@needs_keygen
@pytest.mark.parametrize(
    ("passphrase", "words"),
    [
        ("wrong", "the passphrase does not unlock the key"),
        (None, "set ACR_SIGN_PASSPHRASE"),  # no terminal to ask on (pytest's stdin)
    ],
)
def test_a_passphrase_that_does_not_unlock_the_key_is_named(
    scanned, tmp_path, monkeypatch, passphrase, words
):
    _, run, _ = scanned
    key = keygen(tmp_path / "signer", "correct horse")
    if passphrase is None:
        monkeypatch.delenv("ACR_SIGN_PASSPHRASE", raising=False)
    else:
        monkeypatch.setenv("ACR_SIGN_PASSPHRASE", passphrase)
    assert_clean(cli("export", run, "--bundle", tmp_path / "b", "--sign", key), 2, words)
    assert not (tmp_path / "b").exists()


@needs_keygen
def test_the_signer_writes_ssh_keygens_bytes_and_every_allowed_signer_is_read(scanned, tmp_path):
    """Every key of allowed_signers is read: a bundle signed by its second signer is accepted."""
    _, _, bundle = scanned
    key, other = keygen(tmp_path / "second"), keygen(tmp_path / "first")
    copy = shutil.copytree(bundle, tmp_path / "bundle")
    subprocess.run(
        [KEYGEN, "-q", "-Y", "sign", "-f", str(key), "-n", "acr-scanner-bundle", str(copy / MANIFEST)],
        check=True,
        capture_output=True,
    )
    assert (
        sign_manifest((copy / MANIFEST).read_bytes(), str(key)) == (copy / SIGNATURE).read_bytes()
    )  # byte for byte
    public, first = Path(str(key) + ".pub").read_text(), Path(str(other) + ".pub").read_text()
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(
        f'# signers\nfirst@example {first}second@example namespaces="acr-scanner-bundle" {public}'
    )
    assert published_problems(copy, None, str(allowed)) == []
    assert script.bundle_problems(copy, None, str(allowed)) == []
    allowed.write_text(f'first@example {first}second@example namespaces="git" {public}')  # not for bundles
    assert published_problems(copy, None, str(allowed)) == [
        f"{SIGNATURE}: signed by another key than --signer; the manifest is not signed by {allowed}"
    ]


# RFC 8032 section 7.1, tests 1-3: (secret seed, public key, message, signature)
RFC_8032 = [
    (
        "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
        "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
        "",
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b",
    ),
    (
        "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
        "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
        "72",
        "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00",
    ),
    (
        "c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
        "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025",
        "af82",
        "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a",
    ),
]


@pytest.mark.parametrize(("seed", "public", "message", "signature"), RFC_8032)
def test_signing_and_the_pure_python_check_are_rfc_8032(seed, public, message, signature):
    made = ed25519_sign(bytes.fromhex(seed), bytes.fromhex(message))
    assert made.hex() == signature
    assert script.ed25519_verify(bytes.fromhex(public), bytes.fromhex(message), made)
    assert not script.ed25519_verify(bytes.fromhex(public), bytes.fromhex(message) + b"x", made)


def signed_copy(bundle: Path, where: Path) -> Path:
    """A copy of the bundle signed by a new key (made by cryptography, as `ssh-keygen -t ed25519` would)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    copy = shutil.copytree(bundle, where / "signed")
    key = where / "key"
    key.write_bytes(
        Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
        )
    )
    (copy / SIGNATURE).write_bytes(sign_manifest((copy / MANIFEST).read_bytes(), str(key)))
    return copy


@pytest.mark.parametrize("signer", ["folder", "missing", "not a key"])
def test_a_signer_that_is_no_key_file_is_named_by_verify_and_recheck(scanned, tiny_dir, tmp_path, signer):
    """Named, with no traceback (IsADirectoryError, FileNotFoundError)."""
    bundle = signed_copy(scanned[2], tmp_path)
    path = {"folder": tmp_path, "missing": tmp_path / "absent.pub", "not a key": tmp_path / "notes.txt"}[
        signer
    ]
    if signer == "not a key":
        path.write_text("hello\n")
    words = (
        f"--signer {path}: "
        + {"folder": "a folder", "missing": "no such file", "not a key": "not readable"}[signer]
    )
    assert_clean(recheck(bundle, "--model", tiny_dir, "--signer", path), 2, words)
    assert_clean(cli("verify", "--bundle", bundle, "--model", tiny_dir, "--signer", path), 2, words)


# --- records a relaunch reads back: named, redone, never believed -------------------------------------------


def with_cut(record):
    """A damage of the cut unit's stats: its first span's record replaced by `record(span's record)`."""

    def damage(run: Path) -> str:
        path = run / "search" / "stats" / "00000.json"
        stats = json.loads(path.read_text())
        span = sorted(stats["cut"])[0]
        stats["cut"][span] = record(stats["cut"][span])
        path.write_text(json.dumps(stats))
        return span

    return damage


# The schedule's first length (0, the empty prompt) said to have succeeded, with no prompt found.
CLAIMED = {
    "tried": [[0, True]],
    "refuted": [],
    "found": None,
    "length": None,
    "trial": 0,
    "steps": 0,
    "prompt_ids": None,
    "prompt": None,
}
CUT_RECORDS = {
    "a success with no prompt": with_cut(lambda c: {**c, "resume": CLAIMED}),
    "a record that is a list": with_cut(lambda c: [1, 2]),
    "a resume that is a string": with_cut(lambda c: {**c, "resume": "length 3"}),
    "a tried length that is true": with_cut(lambda c: {**c, "resume": {**CLAIMED, "tried": [[True, False]]}}),
}


@pytest.mark.parametrize("case", list(CUT_RECORDS))
def test_a_cut_search_record_that_cannot_be_believed_reopens_its_unit(cut_run, tmp_path, case):
    """What a relaunch does first (Store.prepare, integrity.py): the unit is named and made pending."""
    from scanner.storage.store import Store

    _, run = cut_run
    copy = shutil.copytree(run, tmp_path / "run")
    span = CUT_RECORDS[case](copy)
    store = Store(copy, "search")
    assert store.stats(0) == {}  # never believed, not even by `status` before a relaunch
    reopened = store.prepare()
    assert list(reopened) == [0] and f"cut.{span}" in reopened[0] and not store.done()


def test_a_search_resumes_from_no_record_that_claims_a_success_without_its_prompt():
    from scanner.search.resume import Resume

    assert Resume.from_json(CLAIMED) is None
    assert Resume.from_json({**CLAIMED, "found": "a prompt"}).tried == ((0, True),)


@pytest.mark.parametrize("case", ["a success with no prompt", "a record that is a list"])
def test_a_relaunch_searches_again_what_a_bad_cut_record_claims(cut_run, tiny_dir, tmp_path, case):
    """Must not: commit a success with no prompt as not_memorized with 0 steps, or fail on a list with a
    traceback (exit 1)."""
    corpus, run = cut_run
    copy = shutil.copytree(run, tmp_path / "run")
    span = CUT_RECORDS[case](copy)
    again = cli("scan", corpus, "--model", tiny_dir, "--out", copy, *CARDS, "--search-budget", "600s")
    assert_clean(again, 0, "holds a cut search record that cannot be believed", "it will be computed again")
    row = next(r for r in pq.read_table(copy / "results").to_pylist() if r["span_id"] == span)
    assert row["status"] in ("memorized", "not_memorized") and row["steps"] > 0 and row["attempts"], row[
        "status"
    ]


@pytest.mark.parametrize(
    "damage",
    [
        lambda plan: {**plan, "units": "all of them"},
        lambda plan: {**plan, "units": [[[0, "forged-span"]]] + plan["units"][1:]},
    ],
    ids=["units of another shape", "a unit naming a span the screen never made"],
)
def test_a_damaged_unit_plan_is_made_again_and_the_relaunch_ends_in_the_same_table(
    cut_run, tiny_dir, tmp_path, damage
):
    """Must not: crash the relaunch, or search what the plan names instead of the screen's candidates."""
    corpus, run = cut_run
    tables = {}
    for name in ("kept", "damaged"):
        copy = shutil.copytree(run, tmp_path / name)
        if name == "damaged":
            plan = json.loads((copy / "search_plan.json").read_text())
            (copy / "search_plan.json").write_text(json.dumps(damage(plan)))
        again = cli("scan", corpus, "--model", tiny_dir, "--out", copy, *CARDS, "--search-budget", "600s")
        assert_clean(again, 0, *(["search_plan.json"] if name == "damaged" else []))
        rows = pq.read_table(copy / "results").to_pylist()
        tables[name] = {
            r["span_id"]: {k: v for k, v in r.items() if k not in RESULTS_WALL_CLOCK} for r in rows
        }
    assert "forged-span" not in tables["damaged"] and tables["damaged"] == tables["kept"]


def pid_true(run: Path) -> None:
    (run / "lock").write_text(json.dumps({"host": socket.gethostname(), "pid": True, "since": "2024-01-01"}))


def stop_of_another_shape(run: Path) -> None:
    (run / "search_stop.json").write_text(
        json.dumps(
            {
                "budget": "auto",
                "unit": True,
                "unit_name": "search-00000",
                "verdicts": 64,
                "window": 64,
                "memorized": 0,
                "at_least": 1,
                "why": "forged",
                "units_left": 0,
                "candidates_left": 0,
            }
        )
    )


def recall_of_another_shape(run: Path) -> None:
    (run / "recall.json").write_text(json.dumps({"recall": "100 %", "found": 9, "strata": 5}))


def audit_plan_of_another_shape(run: Path) -> None:
    (run / "audit_plan.json").write_text(
        json.dumps({"key": "k", "sample": 2, "seed": 0, "strata": [], "units": 7})
    )


def given_up_of_another_shape(run: Path) -> None:
    event = {"task": "search-00000", "pid": 7, "silent_s": 9.0, "hung_after_s": 6, "time": 1.0}
    (run / "given_up.json").write_text(json.dumps({"events": [event, {**event, "pid": "7"}]}))


RUN_RECORDS = {  # damage, then what `status --json` shows of it
    "a lock with pid true": (
        pid_true,
        lambda s: s["scan_process"]["running"] is False and "names no process" in s["scan_process"]["why"],
    ),
    "a search_stop.json of another shape": (stop_of_another_shape, lambda s: s["phases"]["stopped"] is None),
    "a recall.json of another shape": (recall_of_another_shape, lambda s: s["recall"] is None),
    "an audit_plan.json of another shape": (
        audit_plan_of_another_shape,
        lambda s: s["progress"]["audit"]["units_total"] is None,
    ),
    "a given_up.json of another shape": (
        given_up_of_another_shape,
        lambda s: s["progress"]["given_up"] == {"count": 0, "last": None},
    ),
}


@pytest.mark.parametrize("case", list(RUN_RECORDS))
def test_status_believes_no_record_of_the_wrong_shape(scanned, tmp_path, case):
    _, run, _ = scanned
    copy = shutil.copytree(run, tmp_path / "run")
    damage, shown = RUN_RECORDS[case]
    damage(copy)
    done = cli("status", copy)
    assert_clean(done, 0)
    assert shown(json.loads(done.stdout)), done.stdout


def test_a_lock_naming_no_process_is_taken_over_and_a_bad_recall_is_not_reported(scanned, tiny_dir, tmp_path):
    """Must not: hold the lock for a live scan forever (pid true is 1 to Python), or crash the report on
    recall.json."""
    root, run, _ = scanned
    copy = shutil.copytree(run, tmp_path / "run")
    pid_true(copy)
    recall_of_another_shape(copy)
    again = cli("scan", root / "forged.parquet", "--model", tiny_dir, "--out", copy, *SCAN)
    assert_clean(again, 0, "taking over the lock", "names no process")
    recall_of_another_shape(copy)
    report = cli("report", copy, "--out", tmp_path / "r.html")
    assert_clean(report, 0, "recall.json is not believed")
    assert "No recall audit" in (tmp_path / "r.html").read_text()


# --- budgets no scan can spend --------------------------------------------------------------------------


@pytest.mark.parametrize("unit", ["steps", "s", "h"])
def test_a_budget_beyond_any_scan_is_refused(scanned, tiny_dir, tmp_path, unit):
    """Must not: raise OverflowError (exit 1) on 401 digits of steps, or take 401 digits of seconds for an
    infinite budget (`Infinity` in status)."""
    root, _, _ = scanned
    budget = "1" + "0" * 400 + unit
    done = cli(
        "scan",
        root / "forged.parquet",
        "--model",
        tiny_dir,
        "--out",
        tmp_path / "run",
        *SCAN[:-2],
        "--search-budget",
        budget,
    )
    assert_clean(done, 2, "is more than any scan spends", "leave --search-budget out for no ceiling")
    assert not (tmp_path / "run").exists()


# --- bundles: ids escaped, link loops, model links, an empty model record ---------------------------------


def rehash(bundle: Path) -> None:
    """manifest.json made to match the bundle's files as they are (what a careful forger does)."""
    from scanner.results.bundle import manifest

    files = {
        p.name: p.read_bytes() for p in bundle.iterdir() if p.is_file() and not p.name.startswith(MANIFEST)
    }
    (bundle / MANIFEST).write_text(json.dumps(manifest(files)))


def link_loop(bundle: Path, model: Path) -> None:
    (bundle / "evidence.jsonl").unlink()
    (bundle / "evidence.jsonl").symlink_to("evidence.jsonl")


def no_model_files(bundle: Path, model: Path) -> None:
    record = json.loads((bundle / "model.json").read_text())
    (bundle / "model.json").write_text(json.dumps({**record, "files": []}))
    rehash(bundle)


def model_links_out(bundle: Path, model: Path) -> None:
    """The model folder's config.json replaced by a link to a secret elsewhere that model.json names."""
    secret = model.parent / "shadow"
    secret.write_text("root:$6$secret\n")
    (model / "config.json").unlink()
    (model / "config.json").symlink_to(secret)


BUNDLES = {  # damage(bundle, model copy) -> (verify's exit and words, recheck.py's exit and words)
    "a symbolic link loop": (link_loop, (2, "symbolic link loop"), (2, "symbolic link loop")),
    "model.json listing no files": (no_model_files, (2, "lists no weight file"), (1, "lists no weight file")),
    "a model file linking out": (
        model_links_out,
        (2, "leading outside the model folder"),
        (1, "leading outside the model folder"),
    ),
}


@pytest.mark.parametrize("case", list(BUNDLES))
def test_verify_and_recheck_refuse_a_hostile_bundle_or_model_folder(scanned, tiny_dir, tmp_path, case):
    _, _, bundle = scanned
    copy = shutil.copytree(bundle, tmp_path / "bundle")
    model = shutil.copytree(tiny_dir, tmp_path / "model")
    damage, (code, words), (script_code, script_words) = BUNDLES[case]
    damage(copy, model)
    secret = sha256_bytes(b"root:$6$secret\n")[:16]
    out = assert_clean(cli("verify", "--bundle", copy, "--model", model), code, words)
    assert "bundle intact" not in out and secret not in out
    out = assert_clean(recheck(copy, "--model", model), script_code, script_words)
    assert "rows reproduce" not in out and secret not in out


def test_ids_holding_a_newline_are_printed_escaped_and_recheck_warns_without_expect(
    scanned, tiny_dir, tmp_path
):
    """verify and recheck.py must not print a doc_id's newline raw: it would forge a "MATCH forged-doc"
    line."""
    _, _, bundle = scanned
    copy = shutil.copytree(bundle, tmp_path / "bundle")
    rows = [json.loads(line) for line in (copy / "evidence.jsonl").read_text().splitlines()]
    assert rows and all(r["doc_id"] == FORGED_ID for r in rows)
    wrong = {**rows[0], "target_ids": [*rows[0]["target_ids"][:-1], rows[0]["target_ids"][-1] ^ 1]}
    (copy / "evidence.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [wrong, *rows[1:]]))
    rehash(copy)
    escaped = "doc-0\\nMATCH forged-doc span-0: 12/12 tokens\\r\\t"
    for done, code in (
        (cli("verify", "--bundle", copy, "--model", tiny_dir), 3),
        (recheck(copy, "--model", tiny_dir), 1),
    ):
        out = assert_clean(done, code, escaped)
        assert not any(line.startswith("MATCH forged-doc") for line in out.splitlines()), out
    assert "WARNING manifest.json was NOT checked against a published figure" in done.stdout


def test_log_lines_hold_an_id_newline_escaped():
    import logging

    from scanner.cli.main import SafeFormatter

    record = logging.LogRecord("x", logging.WARNING, __file__, 1, "document %s skipped", (FORGED_ID,), None)
    assert SafeFormatter("%(message)s").format(record).count("\n") == 0
