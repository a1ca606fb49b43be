"""Hostile inputs met through the CLI: every path a bundle, a run directory or a report names stays inside
its root; output folders never take in, replace or delete files a command did not write; every bundle
file, malformed, gives a message naming it and no traceback; every id printed reaches the terminal
escaped.

One scan of one document whose id carries terminal escapes (OSC title, CSI clear, a C1 CSI, a bidi
override) and whose text holds a NUL, and one bundle of it, shared by every case; each case damages a
copy. Most cases are refused before a model loads; three load the tiny model (verify, recheck, recheck)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from clirun import cli

from scanner.cli.demo import demo_corpus

HOSTILE_ID = "doc-0\x1b]0;pwned\x07\x1b[2J\x9b31m\u202e"
RAW = ("\x1b]0;", "\x07", "\x1b[2J", "\x9b", "\u202e")  # what a terminal would act on, printed raw
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
]


def recheck(bundle: Path, *args):
    return subprocess.run(
        [sys.executable, str(bundle / "recheck.py"), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def scanned(tiny_dir, tmp_path_factory):
    """(corpus, run, bundle): doc-0 of the demo under a hostile id, a NUL in its text."""
    root = tmp_path_factory.mktemp("hostile")
    row = pq.read_table(demo_corpus(root / "demo.parquet")).slice(0, 1).to_pylist()[0]
    assert "Police." in row["text"]
    corpus = root / "hostile.parquet"
    pq.write_table(
        pa.table({"id": [HOSTILE_ID], "text": [row["text"].replace("Police.", "Police.\x00")]}), corpus
    )
    run, bundle = root / "run", root / "bundle"
    done = cli("scan", corpus, "--model", tiny_dir, "--out", run, *SCAN)
    assert done.returncode == 0, done.stderr
    exported = cli("export", run, "--bundle", bundle)
    assert exported.returncode == 0, exported.stderr
    return corpus, run, bundle


def assert_clean(result, code: int, *words: str) -> None:
    """The exit code, the words, no traceback, and no raw terminal escape in anything printed."""
    out = result.stdout + result.stderr
    assert result.returncode == code, (result.returncode, out[-3000:])
    assert "Traceback" not in out and "internal error" not in out, out[-3000:]
    for word in words:
        assert word in out, (word, out[-3000:])
    for raw in RAW:
        assert raw not in out, (raw, out[-3000:])


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def rehash(bundle: Path, extra: dict[str, str] | None = None) -> None:
    """manifest.json made to match the bundle's files as they are now (a careful forger's step), with
    `extra` names listed too (name -> sha256)."""
    files = {
        p.name: {"sha256": sha256(p), "bytes": p.stat().st_size}
        for p in bundle.iterdir()
        if p.name != "manifest.json" and p.is_file()
    }
    files.update({name: {"sha256": digest, "bytes": 1} for name, digest in (extra or {}).items()})
    (bundle / "manifest.json").write_text(json.dumps({"algorithm": "sha256", "files": files}))


def model_entry(bundle: Path, path: str) -> None:
    model = json.loads((bundle / "model.json").read_text())
    model["files"].append({"path": path, "role": "weight", "bytes": 1, "sha256": "0" * 64})
    (bundle / "model.json").write_text(json.dumps(model))
    rehash(bundle)


def link_out(bundle: Path, name: str) -> None:
    """`name` replaced by a link to an identical copy outside the bundle: every hash still matches."""
    outside = bundle.parent / f"outside-{name}"
    shutil.copyfile(bundle / name, outside)
    (bundle / name).unlink()
    (bundle / name).symlink_to(outside)


# --- traversal and links: what a bundle names stays inside it; the secret is never opened -----------

TRAVERSAL = {
    # a manifest naming a file outside with its right sha256 must not count toward "bundle intact"
    "manifest names ../secret": (
        lambda b, s: rehash(b, {"../secret.txt": sha256(s)}),
        "the bundle's manifest.json",
    ),
    "manifest names an absolute path": (lambda b, s: rehash(b, {str(s): sha256(s)}), "is an absolute path"),
    "manifest names a/../../secret": (
        lambda b, s: rehash(b, {"a/../../secret.txt": sha256(s)}),
        "climbs out",
    ),
    # a link in place of recipe.json, to an identical file outside, must not pass as "bundle intact", exit 0
    "recipe.json is a link out": (lambda b, s: link_out(b, "recipe.json"), "symbolic link"),
    "evidence.jsonl is a link out": (lambda b, s: link_out(b, "evidence.jsonl"), "symbolic link"),
    "model.json is a link out": (lambda b, s: link_out(b, "model.json"), "symbolic link"),
    "manifest.json is a link out": (lambda b, s: link_out(b, "manifest.json"), "symbolic link"),
    # model.json's paths joined under --model stay inside it; a secret's sha256 is never printed
    "model.json names ../secret": (
        lambda b, s: model_entry(b, "../../secret.txt"),
        "the evidence's model.json",
    ),
    "model.json names an absolute path": (lambda b, s: model_entry(b, str(s)), "is an absolute path"),
}


@pytest.mark.parametrize("case", list(TRAVERSAL))
def test_verify_bundle_never_opens_a_file_outside_the_bundle(scanned, tiny_dir, tmp_path, case):
    _, _, bundle = scanned
    secret = tmp_path / "secret.txt"
    secret.write_text("not the bundle's")
    copy = shutil.copytree(bundle, tmp_path / "b" / "bundle")
    damage, words = TRAVERSAL[case]
    damage(copy, secret)
    done = cli("verify", "--bundle", copy, "--model", tiny_dir)
    assert_clean(done, 2, words, "refused")
    assert "bundle intact" not in done.stdout and sha256(secret)[:16] not in done.stdout + done.stderr


def test_recheck_script_never_reads_a_file_outside_the_bundle(scanned, tiny_dir, tmp_path):
    _, _, bundle = scanned
    for name in ("recipe.json", "evidence.jsonl", "environment.json"):
        copy = shutil.copytree(bundle, tmp_path / name / "bundle")
        link_out(copy, name)
        assert_clean(recheck(copy, "--model", tiny_dir), 2, f"{name} is a symbolic link leading outside")


def test_export_bundle_copies_no_file_a_link_in_the_run_directory_points_at(scanned, tmp_path):
    _, run, _ = scanned
    copy = shutil.copytree(run, tmp_path / "run", symlinks=True)
    (tmp_path / "secret.json").write_text('{"secret": 1}')
    (copy / "provenance.json").unlink()
    (copy / "provenance.json").symlink_to(tmp_path / "secret.json")
    done = cli("export", copy, "--bundle", tmp_path / "bundle")
    assert_clean(done, 2, "provenance.json", "symbolic link", "refused")
    assert not (tmp_path / "bundle").exists()


# --- malformed JSON of every bundle file: a message naming the file, never a traceback ---------------

MALFORMED = [
    ("manifest.json", "{not json", "manifest.json is not JSON"),
    ("manifest.json", "[]", "manifest.json is not a JSON object"),
    ("manifest.json", '{"files": ["evidence.jsonl"]}', '"files" is list'),  # named, not a traceback
    ("manifest.json", '{"files": {"evidence.jsonl": "abc"}}', "hold no sha256"),
    ("model.json", b"\xff not json", "model.json is not JSON"),
    ("model.json", '{"files": {"path": "x"}}', '"files" is not a list'),
    ("model.json", '{"files": [{"path": 1, "role": "weight", "sha256": "0"}]}', '"files" is not a list'),
    ("run_config.json", "", "run_config.json is not JSON"),
    ("run_config.json", '{"config": []}', "not a run configuration"),
    ("run_config.json", '{"config": {"model": {"bogus": 1}, "prompt": {}}}', "not a run configuration"),
    ("recipe.json", "[1, 2]", "recipe.json is not a JSON object"),
]


@pytest.mark.parametrize(("name", "text", "words"), MALFORMED)
def test_verify_bundle_names_a_malformed_file(scanned, tiny_dir, tmp_path, name, text, words):
    _, _, bundle = scanned
    copy = shutil.copytree(bundle, tmp_path / "bundle")
    (copy / name).write_bytes(text if isinstance(text, bytes) else text.encode())
    if name != "manifest.json":
        rehash(copy)  # only the damage itself is the fault
    assert_clean(cli("verify", "--bundle", copy, "--model", tiny_dir), 2, words, "damaged")


RECHECK_MALFORMED = [
    ("recipe.json", "{not json", "recipe.json is not JSON"),
    ("recipe.json", '{"prefix_text": 1}', "recipe.json does not hold prefix_text"),
    ("environment.json", "[]", "environment.json is not a JSON object"),
    ("evidence.jsonl", None, "evidence.jsonl is missing"),
]


def remanifest(folder: Path) -> None:
    """What an attacker who edits a bundle also does when no --expect is given: a manifest of the edited
    files, so that the parsers behind the manifest check meet the damage."""
    from scanner.results.bundle import MANIFEST, manifest

    files = {
        p.name: p.read_bytes() for p in folder.iterdir() if p.is_file() and not p.name.startswith(MANIFEST)
    }
    (folder / MANIFEST).write_text(json.dumps(manifest(files)))


def test_recheck_script_names_a_malformed_file(scanned, tiny_dir, tmp_path):
    _, _, bundle = scanned
    for number, (name, text, words) in enumerate(RECHECK_MALFORMED):
        copy = shutil.copytree(bundle, tmp_path / str(number) / "bundle")
        if text is None:
            (copy / name).unlink()
        else:
            (copy / name).write_text(text)
        remanifest(copy)
        assert_clean(recheck(copy, "--model", tiny_dir), 2, words)


def test_a_deleted_evidence_file_is_named_as_missing(scanned, tiny_dir, tmp_path):
    """Named as missing, not as "a folder on that path does not exist ... create it" (the wrong cause and
    fix)."""
    _, _, bundle = scanned
    copy = shutil.copytree(bundle, tmp_path / "bundle")
    (copy / "evidence.jsonl").unlink()
    done = cli("verify", "--bundle", copy, "--model", tiny_dir)
    assert_clean(done, 2, "evidence.jsonl is missing", "get the whole bundle")
    assert "create it" not in done.stderr


def test_verify_bundle_lists_rows_it_cannot_check_and_prints_ids_escaped(scanned, tiny_dir, tmp_path):
    """Target ids too large, or not ids, are listed rather than crash generation, and ids are printed
    escaped: one engine load."""
    _, _, bundle = scanned
    copy = shutil.copytree(bundle, tmp_path / "bundle")
    rows = [json.loads(line) for line in (copy / "evidence.jsonl").read_text().splitlines()]
    last = rows[1]["target_ids"][-1]
    wrong = {
        **rows[1],
        "target_ids": [*rows[1]["target_ids"][:-1], last ^ 1],
    }  # no longer reproduces: id printed
    lines = [
        json.dumps(rows[0]),
        json.dumps({**rows[0], "target_ids": [10**12]}),
        json.dumps({**rows[0], "target_ids": ["x", None]}),
        "{damaged",
        json.dumps(wrong),
    ]
    (copy / "evidence.jsonl").write_text("\n".join(lines) + "\n")
    rehash(copy)
    (copy / f"notes{HOSTILE_ID}.txt").write_text("added")  # a file name with escapes, named as added
    done = cli("verify", "--bundle", copy, "--model", tiny_dir)
    escaped = "doc-0\\x1b]0;pwned\\x07\\x1b[2J\\x9b31m\\u202e"
    assert_clean(
        done,
        3,
        "target id 1000000000000 is outside the model's vocabulary",
        "evidence.jsonl line 3: no prompt string and target_ids",
        "evidence.jsonl line 4: not JSON",
        f"NOT REPRODUCED {escaped}",
        f"notes{escaped}.txt: not in manifest.json",
        "1/2 flagged spans reproduce",
    )


def test_recheck_script_skips_a_damaged_row_and_prints_ids_escaped(scanned, tiny_dir, tmp_path):
    """A damaged line is skipped, not a traceback, and recheck.py prints doc ids escaped."""
    _, _, bundle = scanned
    copy = shutil.copytree(bundle, tmp_path / "bundle")
    with open(copy / "evidence.jsonl", "a") as f:
        f.write("{damaged\n")
    remanifest(copy)
    done = recheck(copy, "--model", tiny_dir)
    rows = len((copy / "evidence.jsonl").read_text().splitlines())
    assert_clean(
        done,
        1,
        f"DAMAGED evidence row {rows}: not JSON",
        "MATCH doc-0\\x1b]0;pwned\\x07",
        f"{rows - 1}/{rows} rows reproduce",
    )


def test_recheck_script_refuses_a_model_path_that_does_not_exist(scanned, tmp_path):
    """Refused by name: not tried on the hub, no traceback."""
    _, _, bundle = scanned
    assert_clean(recheck(bundle, "--model", tmp_path / "absent"), 2, "no such folder or file")


def test_an_error_message_prints_a_hostile_path_escaped(tiny_dir, tmp_path):
    """InputError messages quote what a user or a file gave, escaped."""
    done = cli("verify", "--bundle", tmp_path / f"b{HOSTILE_ID}", "--model", tiny_dir)
    assert_clean(done, 2, "no such folder", "\\x1b]0;pwned")


# --- output folders: never another's files taken in, replaced or deleted ------------------------------


def foreign_pages_file(reports: Path) -> Path:
    (reports / "y-passages").write_text("my own file")
    return reports / "y.html"


def foreign_pages_folder(reports: Path) -> Path:
    (reports / "y-passages").mkdir()
    (reports / "y-passages" / "notes.txt").write_text("my own file")
    return reports / "y.html"


def out_is_a_folder(reports: Path) -> Path:
    (reports / "y.html").mkdir()
    (reports / "y.html" / "notes.txt").write_text("my own file")
    return reports / "y.html"


REPORT_OUTS = {  # neither the file nor the notes may be deleted, nor an internal temp file named
    "pages folder is a file": (foreign_pages_file, "y-passages exists and is not a folder a report wrote"),
    "pages folder holds notes": (
        foreign_pages_folder,
        "was not written by acr-scan report (it holds 'notes.txt')",
    ),
    "--out is a folder": (out_is_a_folder, "y.html is a folder; name the HTML file"),
}


@pytest.mark.parametrize("case", list(REPORT_OUTS))
def test_report_never_replaces_files_it_did_not_write(scanned, tmp_path, case):
    _, run, _ = scanned
    reports = tmp_path / "reports"
    reports.mkdir()
    make, words = REPORT_OUTS[case]
    out = make(reports)
    before = {p: p.read_bytes() for p in reports.rglob("*") if p.is_file()}
    done = cli("report", run, "--out", out)
    assert_clean(done, 2, words)
    assert ".tmp" not in done.stderr
    assert {p: p.read_bytes() for p in reports.rglob("*") if p.is_file()} == before


def test_report_keeps_control_characters_of_the_corpus_out_of_its_html(scanned, tmp_path):
    """A NUL of the corpus text must not reach the HTML raw, nor the id's escapes. Written twice: a report
    replaces the pages folder it wrote itself."""
    _, run, _ = scanned
    for _ in range(2):
        assert_clean(cli("report", run, "--out", tmp_path / "r.html"), 0, "report written")
    assert sorted(p.suffix for p in (tmp_path / "r-passages").iterdir()) == [
        "",
        ".html",
    ]  # the marker, a page
    pages = [tmp_path / "r.html", *(tmp_path / "r-passages").glob("*.html")]
    html = "".join(p.read_text(encoding="utf-8") for p in pages)
    assert not re.search("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]", html)
    assert "Police.\u2400" in html and "doc-0\u241b]0;pwned\u2407" in html  # shown, as control pictures


def test_report_refuses_a_negative_context(scanned, tmp_path):
    """--context-chars -5 is refused, not taken to make every page say the corpus was not at hand."""
    _, run, _ = scanned
    done = cli("report", run, "--out", tmp_path / "r.html", "--context-chars", "-5")
    assert_clean(done, 2, "--context-chars -5: must be 0 or more")
    assert not (tmp_path / "r.html").exists()


def test_report_with_no_context_shows_the_passage_where_it_lies(scanned, tmp_path):
    _, run, _ = scanned
    assert_clean(
        cli("report", run, "--out", tmp_path / "r.html", "--context-chars", "0"), 0, "report written"
    )
    page = next((tmp_path / "r-passages").glob("*.html")).read_text(encoding="utf-8")
    assert "not at hand" not in page and "in the document, with the text around them" in page


def plan_folder(folder: Path, run: Path) -> None:
    (folder / "sample.parquet").write_bytes(b"PAR1")
    (folder / "sample.json").write_text("{}")


def notes_folder(folder: Path, run: Path) -> None:
    (folder / "notes.txt").write_text("my own file")


SCAN_OUTS = {
    "a plan's folder": (plan_folder, "'sample.json', 'sample.parquet'"),
    "a folder of notes": (notes_folder, "'notes.txt'"),
}


@pytest.mark.parametrize("case", list(SCAN_OUTS))
def test_scan_writes_into_no_folder_of_others_files(scanned, tiny_dir, tmp_path, case):
    corpus, run, _ = scanned
    out = tmp_path / "out"
    out.mkdir()
    make, words = SCAN_OUTS[case]
    make(out, run)
    before = sorted(os.listdir(out))
    done = cli("scan", corpus, "--model", tiny_dir, "--out", out, *SCAN)
    assert_clean(
        done, 2, f"--out {out} holds files that are not a run directory's", words, "pass a new --out"
    )
    assert sorted(os.listdir(out)) == before


def test_plan_writes_into_no_run_directory(scanned, tiny_dir):
    """`plan --out RUN_DIR` must not mix a plan's files into a scan's run directory."""
    corpus, run, _ = scanned
    before = sorted(os.listdir(run))
    done = cli("plan", corpus, "--model", tiny_dir, "--out", run, "--sample", "1", *SCAN)
    assert_clean(done, 2, "is a scan's run directory")
    assert sorted(os.listdir(run)) == before


# --- the one rule and its deliberate copy in recheck.py (which imports nothing of the package) --------

NAMES = {
    "evidence.jsonl": True,
    "sub/model.safetensors": True,
    "../secret": False,
    "/etc/passwd": False,
    "a/../../secret": False,
    "a\\..\\secret": False,
    "x\x00y": False,
    "": False,
    "link": False,
}


def test_recheck_keeps_the_same_rule_as_the_package(tmp_path):
    from scanner.cli.output import UNSAFE
    from scanner.confine import escape_reason
    from scanner.results import recheck as script

    root = tmp_path / "bundle"
    (root / "sub").mkdir(parents=True)
    (root / "link").symlink_to(tmp_path)
    for name, stays in NAMES.items():
        assert (escape_reason(root, name) is None) == stays, name
        assert (script.escape_reason(root, name) is None) == stays, name
    assert script.UNSAFE.pattern == UNSAFE.pattern
    # a model folder's links stay in its tree or lead into the hub cache's blobs (tests/test_hostile_records.py)
    assert escape_reason(root, "link", model_folder=True) is not None
    assert script.escape_reason(root, "link", model_folder=True) is not None
    assert script.escape_reason(root, "../x", model_folder=True) is not None  # names stay confined


def test_recheck_script_checks_a_model_folder_made_of_links(scanned, tiny_dir, tmp_path):
    """The hub cache's shape: a snapshot folder whose files are links into ../../blobs. The model is the
    user's own, so its links are followed (as the package does); only the names model.json gives are
    confined."""
    _, _, bundle = scanned
    blobs, snapshot = tmp_path / "blobs", tmp_path / "snapshots" / "abc"
    blobs.mkdir()
    snapshot.mkdir(parents=True)
    for f in Path(tiny_dir).iterdir():
        if f.is_file():
            shutil.copy(f, blobs / f.name)
            (snapshot / f.name).symlink_to(Path("..", "..", "blobs", f.name))
    done = recheck(bundle, "--model", snapshot)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "missing" not in done.stdout and "rows reproduce" in done.stdout


def test_log_lines_are_terminal_safe():
    import logging

    from scanner.cli.main import SafeFormatter

    record = logging.LogRecord("x", logging.WARNING, __file__, 1, "document %s skipped", (HOSTILE_ID,), None)
    line = SafeFormatter("%(message)s").format(record)
    assert line == "document doc-0\\x1b]0;pwned\\x07\\x1b[2J\\x9b31m\\u202e skipped"
