"""Evidence that holds under attack, through the CLI on the tiny model: the scan's model identity is its
bytes (recorded when the run starts, checked by every worker, copied into the bundle, checked by
recheck.py), bundles that say what they were drawn from and whether the run was complete, a manifest
checked against its published digest or an ssh-ed25519 signature, and a run_config.json that is checked
rather than trusted. Each attack has its test, named after what must hold.

One document whose spans its certificates settle (--max-candidates 0) keeps the scan to seconds."""

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from clirun import cli

from scanner.cli.demo import demo_corpus
from scanner.cli.evidence import verify_lines
from scanner.config import ModelConfig
from scanner.engine.identity import model_files, stamps
from scanner.errors import InputError
from scanner.results.bundle import DENOMINATORS, EVIDENCE, MANIFEST, SIGNATURE, sha256_bytes
from scanner.results.recheck import ed25519_verify, public_key, ssh_string, sshsig_verify
from scanner.results.signing import BEGIN, END, ed25519_sign, sign_manifest
from scanner.results.verify import Recheck, published_problems
from scanner.run.model_record import check_loaded, record_model
from scanner.storage.rundir import RunDir

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

# A throwaway test key made by `ssh-keygen -t ed25519 -N ""`, and `ssh-keygen -Y sign -n acr-scanner-bundle`'s
# signature of MESSAGE with it: the signer must write the same bytes, the verifier accept them.
TEST_KEY = """-----BEGIN OPENSSH PRIVATE KEY-----
b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW
QyNTUxOQAAACAhX5BzJCqmAH1+1+pDyiboZYfMqi6o/9fv80s/9HwcHgAAAJidhINJnYSD
SQAAAAtzc2gtZWQyNTUxOQAAACAhX5BzJCqmAH1+1+pDyiboZYfMqi6o/9fv80s/9HwcHg
AAAED4R3hPAOksGpYinWp7ob2eBb4jG+7vslaDcsToGgU4mSFfkHMkKqYAfX7X6kPKJuhl
h8yqLqj/1+/zSz/0fBweAAAAFGFjci1zY2FubmVyIHRlc3Qga2V5AQ==
-----END OPENSSH PRIVATE KEY-----
"""
TEST_PUB = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICFfkHMkKqYAfX7X6kPKJuhlh8yqLqj/1+/zSz/0fBwe acr-scanner test key\n"
)
MESSAGE = b'{"algorithm": "sha256", "files": {}}\n'
SSH_KEYGEN_SIGNATURE = b"""-----BEGIN SSH SIGNATURE-----
U1NIU0lHAAAAAQAAADMAAAALc3NoLWVkMjU1MTkAAAAgIV+QcyQqpgB9ftfqQ8om6GWHzK
ouqP/X7/NLP/R8HB4AAAASYWNyLXNjYW5uZXItYnVuZGxlAAAAAAAAAAZzaGE1MTIAAABT
AAAAC3NzaC1lZDI1NTE5AAAAQL7JJ6MNUwLgkxV+nxe3tV21EpC/7vTtptINj+kvl8VtI+
+qjKz91SrX5fEXrfRQUo+mEUi87j/QzhAbiX5GCAk=
-----END SSH SIGNATURE-----
"""


def recheck_script(bundle: Path, *args):
    return subprocess.run(
        [sys.executable, "-I", str(bundle / "recheck.py"), *args], capture_output=True, text=True, timeout=600
    )


def one_byte_changed(model: Path, where: Path) -> Path:
    """A copy of the model whose weights differ in their last byte (same size; it still loads)."""
    copy = shutil.copytree(model, where)
    weights = bytearray((copy / "model.safetensors").read_bytes())
    weights[-1] ^= 1
    (copy / "model.safetensors").write_bytes(bytes(weights))
    return copy


@pytest.fixture(scope="module")
def scanned(tiny_dir, tmp_path_factory):
    """(run, signed bundle, its manifest sha256, key folder) of a one-document scan."""
    root = tmp_path_factory.mktemp("identity")
    corpus = root / "doc-0.parquet"
    pq.write_table(pq.read_table(demo_corpus(root / "demo.parquet")).slice(0, 1), corpus)
    (root / "key").write_text(TEST_KEY)
    os.chmod(root / "key", 0o600)
    (root / "key.pub").write_text(TEST_PUB)
    run, bundle = root / "run", root / "bundle"
    done = cli("scan", str(corpus), "--model", str(tiny_dir), "--out", str(run), *SCAN)
    assert done.returncode == 0, done.stderr
    exported = cli("export", str(run), "--bundle", str(bundle), "--sign", str(root / "key"))
    assert exported.returncode == 0, exported.stderr
    digest = sha256_bytes((bundle / MANIFEST).read_bytes())
    assert f"sha256 {digest}" in exported.stdout and "signed" in exported.stdout
    return run, bundle, digest, root, corpus


def test_the_run_records_its_model_bytes_when_it_starts(scanned, tiny_dir):
    run = scanned[0]
    record = json.loads((run / "model.json").read_text())
    assert record["files"] == model_files(Path(tiny_dir))  # sha256 of every file, weights included
    provenance = json.loads((run / "provenance.json").read_text())
    assert float(provenance["model_hash_s"]) >= 0 and len(provenance["model_hash"]) == 64
    assert (
        pq.read_schema(next((run / "results").glob("*.parquet"))).metadata[b"model_hash"].decode()
        == provenance["model_hash"]
    )


def test_export_refuses_a_model_with_other_bytes(scanned, tiny_dir, tmp_path):
    """A bundle must not name a model (a copy with changed weights) that never produced its evidence."""
    run, bundle, _, _, _ = scanned
    copy = one_byte_changed(Path(tiny_dir), tmp_path / "copy")
    got = cli("export", str(run), "--bundle", str(tmp_path / "b"), "--model", str(copy))
    assert got.returncode == 2, got.stderr
    assert (
        "not the model this run scanned" in got.stderr
        and "model.safetensors (weight): other bytes" in got.stderr
    )
    assert not (tmp_path / "b").exists()
    # The bundle's model.json is the run's record, byte for byte in content: never hashed again at export.
    assert json.loads((bundle / "model.json").read_text()) == json.loads((run / "model.json").read_text())


def test_workers_and_relaunches_check_the_bytes_against_the_record(scanned, tiny_dir, tmp_path):
    run = RunDir(shutil.copytree(scanned[0], tmp_path / "run"))
    model = shutil.copytree(tiny_dir, tmp_path / "model")
    seen = stamps(model, [f["path"] for f in model_files(model)])
    config = ModelConfig(model=str(model))
    assert check_loaded(run.path, config) == check_loaded(run.path, config, seen)  # same bytes: both pass
    weights = bytearray((model / "model.safetensors").read_bytes())
    weights[-1] ^= 1
    (model / "model.safetensors").write_bytes(bytes(weights))
    for given in (None, seen):  # a Ray actor (re-hash) and the driver's own process (stamp moved: re-hash)
        with pytest.raises(InputError, match="model.safetensors .weight.: other bytes"):
            check_loaded(run.path, config, given)
    with pytest.raises(InputError, match="not the bytes this run was scanned with"):
        record_model(run.path, config, finished=True)  # a relaunch with other weights under the same path


def test_recheck_refuses_a_model_with_one_byte_changed(scanned, tiny_dir, tmp_path):
    """recheck.py checks the model it is given against model.json before it generates anything."""
    _, bundle, digest, root, _ = scanned
    copy = one_byte_changed(Path(tiny_dir), tmp_path / "copy")
    got = recheck_script(bundle, "--model", str(copy), "--expect", digest, "--signer", str(root / "key.pub"))
    assert got.returncode == 1, got.stdout + got.stderr
    assert "PROBLEM model file 'model.safetensors': other bytes" in got.stdout
    assert "nothing generated" in got.stdout and "MATCH" not in got.stdout


def test_a_rewritten_manifest_fails_expect_and_signature(scanned, tiny_dir, tmp_path):
    """Every doc_id rewritten and the manifest re-hashed must not pass as "bundle intact": the published
    digest (--expect) and the signature (--signer) both catch it."""
    _, bundle, digest, root, _ = scanned
    assert published_problems(bundle, digest, str(root / "key.pub")) == []  # the bundle as published
    forged = shutil.copytree(bundle, tmp_path / "forged")
    rows = [
        {**json.loads(line), "doc_id": "another work"}
        for line in (forged / EVIDENCE).read_text().splitlines()
    ]
    (forged / EVIDENCE).write_text("".join(json.dumps(r) + "\n" for r in rows))
    index = json.loads((forged / MANIFEST).read_text())
    data = (forged / EVIDENCE).read_bytes()
    index["files"][EVIDENCE] = {"sha256": sha256_bytes(data), "bytes": len(data)}
    (forged / MANIFEST).write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
    got = cli("verify", "--bundle", str(forged), "--model", str(tiny_dir), "--expect", digest)
    assert got.returncode == 3, got.stdout + got.stderr
    assert (
        f"is not the expected {digest} (--expect)" in got.stdout
        and "1 problem(s) in the bundle" in got.stdout
    )
    bare = recheck_script(forged, "--model", str(tiny_dir), "--signer", str(root / "key.pub"))
    assert bare.returncode == 1 and f"PROBLEM {SIGNATURE}: the signature does not match" in bare.stdout, (
        bare.stdout
    )
    # Without --expect or --signer, verify says the manifest went unchecked.
    assert (
        "NOT checked against a published figure"
        in verify_lines(Recheck({"engine": "hf", "dtype": "float32"}, 1.0, [], []), bundle=str(forged))[1]
    )


def test_a_bundle_of_a_killed_run_says_it_is_partial(scanned, tiny_dir, tmp_path):
    """A killed run's bundle says it is partial and carries its denominators."""
    run = shutil.copytree(scanned[0], tmp_path / "run")
    for folder in ("done", "results"):  # killed before its one shard was written
        shutil.rmtree(run / folder)
        (run / folder).mkdir()
    got = cli("export", str(run), "--bundle", str(tmp_path / "b"))
    assert got.returncode == 0, got.stderr
    counts = json.loads((tmp_path / "b" / DENOMINATORS).read_text())
    assert counts["complete"] is False and counts["shards_done"] == 0 and counts["shards_total"] == 1
    complete = json.loads((scanned[1] / DENOMINATORS).read_text())
    assert complete["complete"] is True and complete["run"]["memorized"] == complete["rows"] > 0
    verified = cli("verify", "--bundle", str(tmp_path / "b"), "--model", str(tiny_dir))
    assert "PARTIAL: the scan was unfinished when exported" in verified.stdout, verified.stdout
    assert "0 of 1 shards" in verified.stdout


def test_an_edited_run_config_is_refused(scanned, tiny_dir, tmp_path):
    """max_candidates edited by hand, run_hash left alone, and a relaunch under the new value: refused."""
    _, _, _, _, corpus = scanned
    run = shutil.copytree(scanned[0], tmp_path / "run")
    saved = json.loads((run / "run_config.json").read_text())
    saved["config"]["max_candidates"] = 2
    (run / "run_config.json").write_text(json.dumps(saved))
    args = [a if a != "0" or i == 0 or SCAN[i - 1] != "--max-candidates" else "2" for i, a in enumerate(SCAN)]
    got = cli("scan", str(corpus), "--model", str(tiny_dir), "--out", str(run), *args)
    assert got.returncode == 2, got.stderr
    assert f"{run / 'run_config.json'} was edited after the run started" in got.stderr


def test_the_signature_is_ssh_keygens_and_ed25519_is_rfc_8032(tmp_path):
    key = tmp_path / "key"
    key.write_text(TEST_KEY)
    assert sign_manifest(MESSAGE, str(key)) == SSH_KEYGEN_SIGNATURE  # deterministic: the same bytes
    public = public_key(TEST_PUB)
    assert sshsig_verify(SSH_KEYGEN_SIGNATURE.decode(), MESSAGE, public) is None
    assert (
        sshsig_verify(SSH_KEYGEN_SIGNATURE.decode(), MESSAGE + b" ", public) == "the signature does not match"
    )
    # RFC 8032 section 7.1, test 1 (the empty message)
    seed = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
    signature = ed25519_sign(seed, b"")
    assert signature.hex() == (
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33ba"
        "cc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
    )
    pub = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
    assert ed25519_verify(pub, b"", signature) and not ed25519_verify(pub, b"x", signature)
    encrypted = tmp_path / "encrypted"  # the start of a passphrase-protected key: its cipher is named first
    blob = b"openssh-key-v1\0" + ssh_string(b"aes256-ctr") + ssh_string(b"bcrypt") + ssh_string(b"")
    encrypted.write_text(f"{BEGIN}\n{base64.b64encode(blob).decode()}\n{END}\n")
    with pytest.raises(InputError, match="ssh-keygen -Y sign"):
        sign_manifest(MESSAGE, str(encrypted))
