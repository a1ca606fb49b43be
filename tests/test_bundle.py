"""Evidence a third party re-checks, through the CLI on the tiny model: the margin of each success's own
generation and `fragile`, `verify --dtype` on another numeric path, and `export --bundle`: its manifest
and model hashes, its standalone recheck.py run by an interpreter that cannot import this package, and
`verify --bundle` naming an edited byte and a different model file.

One document (doc-0, whose canary's spans are settled by their certificates, no GCG: --max-candidates 0)
keeps the scan to seconds."""

import json
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from clirun import cli

from scanner.cli.demo import demo_corpus
from scanner.cli.evidence import recheck_lines
from scanner.config import SearchConfig
from scanner.engine.identity import file_role, model_files, sha256_file
from scanner.errors import InputError
from scanner.results import recheck
from scanner.results.bundle import EVIDENCE, MANIFEST
from scanner.results.rows import robustness_columns
from scanner.results.verify import Check, Recheck, manifest_problems, verify_bundle

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


@pytest.fixture(scope="module")
def bundled(tiny_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("bundle")
    corpus = root / "doc-0.parquet"
    pq.write_table(pq.read_table(demo_corpus(root / "demo.parquet")).slice(0, 1), corpus)
    run, bundle = root / "run", root / "bundle"
    done = cli("scan", str(corpus), "--model", str(tiny_dir), "--out", str(run), *SCAN)
    assert done.returncode == 0, done.stderr
    exported = cli("export", str(run), "--bundle", str(bundle))
    assert exported.returncode == 0, exported.stderr
    flagged = [r for r in pq.read_table(run / "results").to_pylist() if r["memorized"]]
    assert flagged and all(r["acr_kind"] == "certificate_bound" for r in flagged)
    return run, bundle, flagged, exported.stdout


def test_every_success_records_its_generation_margin_and_fragility(bundled):
    _, _, flagged, _ = bundled
    for row in flagged:
        assert 0 <= row["generation_margin_at"] < row["target_tokens"]
        assert row["fragile_below"] == SearchConfig().fragile_margin
        assert row["fragile"] == (row["generation_margin"] < row["fragile_below"])
        # float32 on a CPU: the KV-cached generation and the teacher-forced pass agree to rounding
        assert row["generation_margin"] > 0 and abs(row["generation_margin"] - row["min_margin"]) < 1e-3
    assert len({r["generation_margin_at"] for r in flagged}) > 1  # a position, not a constant


def test_robustness_columns_and_the_threshold_check():
    assert robustness_columns((0.5, 3), 1.0) == {
        "generation_margin": 0.5,
        "generation_margin_at": 3,
        "fragile_below": 1.0,
        "fragile": True,
    }
    assert robustness_columns((1.0, 0), 1.0)["fragile"] is False
    assert set(robustness_columns((None, None), 1.0).values()) == {None}
    with pytest.raises(InputError, match="--fragile-margin -1"):
        SearchConfig(fragile_margin=-1)


def test_the_bundle_holds_the_evidence_the_model_identity_and_a_manifest_of_every_file(bundled, tiny_dir):
    run, bundle, flagged, stdout = bundled
    index = json.loads((bundle / MANIFEST).read_text())
    names = {p.name for p in bundle.iterdir()}
    assert set(index["files"]) == names - {MANIFEST}
    assert {
        "evidence.jsonl",
        "run_config.json",
        "provenance.json",
        "model.json",
        "environment.json",
        "recipe.json",
        "recheck.py",
        "README.md",
    } <= names
    assert all(sha256_file(bundle / n) == e["sha256"] for n, e in index["files"].items())
    assert sha256_file(bundle / MANIFEST) in stdout
    assert (bundle / "run_config.json").read_bytes() == (run / "run_config.json").read_bytes()
    rows = [json.loads(line) for line in (bundle / EVIDENCE).read_text().splitlines()]
    assert sorted(r["span_id"] for r in rows) == sorted(r["span_id"] for r in flagged)
    assert all(r["generation_margin"] is not None and r["target_ids"] and r["verify_dtype"] for r in rows)
    model = json.loads((bundle / "model.json").read_text())
    assert model["files"] == model_files(Path(tiny_dir))
    assert {f["path"]: f["role"] for f in model["files"]}["model.safetensors"] == "weight"
    recipe_ = json.loads((bundle / "recipe.json").read_text())
    assert recipe_["prefix_ids"] == recipe_["bos_ids"] == [1] and recipe_["suffix_ids"] == []
    environment = json.loads((bundle / "environment.json").read_text())
    assert environment["scan"]["dtype"] == "float32" and environment["export"]["libraries"]["torch"]
    assert environment["scan"]["rows_verified_by"] == [
        {"engine": "hf", "version": rows[0]["verify_version"], "dtype": "float32"}
    ]
    again = cli("export", str(run), "--bundle", str(bundle))
    assert again.returncode == 2 and "not an empty folder" in again.stderr


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory):
    """A venv holding every library of this one but acr-scanner itself (symlinked, no copies)."""
    where = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    python = where / "bin" / "python"
    inside = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    for lib in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}:
        for entry in Path(lib).iterdir():
            if (
                not entry.name.startswith(("scanner", "acr_scanner", "__editable__"))
                and not (inside / entry.name).exists()
            ):
                (inside / entry.name).symlink_to(entry)
    return python


def test_the_standalone_script_rechecks_every_row_without_this_package(
    bundled, bare_python, tiny_dir, tmp_path
):
    _, bundle, flagged, _ = bundled
    # -I: no PYTHONPATH (the tests' own points at this package), no user site, no script folder on the path
    absent = subprocess.run(
        [bare_python, "-I", "-c", "import scanner"], capture_output=True, text=True, cwd=tmp_path
    )
    assert absent.returncode == 1 and "No module named 'scanner'" in absent.stderr
    done = subprocess.run(
        [bare_python, "-I", str(bundle / "recheck.py"), "--model", str(tiny_dir)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("MATCH")]
    assert len(lines) == len(flagged) and f"{len(flagged)}/{len(flagged)} rows reproduce" in done.stdout
    measured = {
        m[1]: (float(m[2]), int(m[3]))
        for m in re.finditer(r"(\w+): 12/12 tokens, margin (-?[\d.]+) at token (\d+) \(scan:", done.stdout)
    }
    for row in flagged:  # the margin it measures is the scan's, up to float noise at the printed decimals
        margin, at = measured[row["span_id"]]
        assert at == row["generation_margin_at"] and margin == pytest.approx(
            row["generation_margin"], abs=2e-4
        )


def test_the_script_names_a_row_that_does_not_reproduce(bundled, loaded):
    _, bundle, _, _ = bundled
    recipe_, rows, _ = recheck.read_bundle(bundle)
    ok, line = recheck.check_row(loaded.tokenizer, loaded.model, recipe_, rows[0])
    assert ok and line.startswith("12/12 tokens")
    wrong = {**rows[0], "target_ids": rows[0]["target_ids"][:5] + [7] + rows[0]["target_ids"][6:]}
    ok, line = recheck.check_row(loaded.tokenizer, loaded.model, recipe_, wrong)
    assert not ok and line.startswith("5/12 tokens")
    retyped = {**rows[0], "prompt_ids": [*rows[0]["prompt_ids"], 5]}
    assert recheck.check_row(loaded.tokenizer, loaded.model, recipe_, retyped)[0] is False


def test_an_intact_bundle_verifies(bundled, tiny_dir):
    _, bundle, flagged, _ = bundled
    checked = verify_bundle(str(bundle), str(tiny_dir))
    assert checked.ok and not checked.problems and len(checked.checks) == len(flagged)
    assert [c.generation_margin for c in checked.checks] == pytest.approx(
        [r["generation_margin"] for r in json_rows(bundle)], abs=1e-4
    )


def json_rows(bundle: Path) -> list[dict]:
    return [json.loads(line) for line in (bundle / EVIDENCE).read_text().splitlines()]


def test_verify_bundle_names_an_edited_byte_and_a_different_model_file(bundled, tiny_dir, tmp_path):
    _, bundle, _, _ = bundled
    copy = shutil.copytree(bundle, tmp_path / "bundle")
    data = bytearray((copy / EVIDENCE).read_bytes())
    at = data.index(b'"text": "') + len(b'"text": "')
    data[at] = ord("X") if data[at] != ord("X") else ord("Y")  # one byte of a span's text, still JSON
    (copy / EVIDENCE).write_bytes(bytes(data))
    model = shutil.copytree(tiny_dir, tmp_path / "model")
    weights = bytearray((model / "model.safetensors").read_bytes())
    weights[-1] ^= 1  # the last byte of the last tensor: a different model file that still loads
    (model / "model.safetensors").write_bytes(bytes(weights))
    done = cli("verify", "--bundle", str(copy), "--model", str(model))
    assert done.returncode == 3, done.stdout + done.stderr
    problems = [line for line in done.stdout.splitlines() if line.startswith("PROBLEM")]
    assert len(problems) == 2, done.stdout
    assert (
        "evidence.jsonl: edited" in problems[0]
        and "model file model.safetensors (weight): a different" in problems[1]
    )
    assert "2 problem(s) in the bundle" in done.stdout


def test_manifest_problems_name_missing_and_added_files(bundled, tmp_path):
    _, bundle, _, _ = bundled
    copy = shutil.copytree(bundle, tmp_path / "bundle")
    (copy / "recheck.py").unlink()
    (copy / "notes.txt").write_text("added later")
    assert manifest_problems(copy) == [
        "recheck.py: listed in manifest.json but missing",
        "notes.txt: not in manifest.json (added after the bundle was written)",
    ]


def test_verify_in_float32_agrees_on_the_tiny_model(bundled):
    run, _, flagged, _ = bundled
    done = cli("verify", str(run), "--dtype", "float32")
    assert done.returncode == 0, done.stdout + done.stderr
    n = len(flagged)
    assert (
        f"{n}/{n} flagged spans reproduce under hf float32 on cpu (the scan verified with hf float32)"
        in done.stdout
    )
    fragile = sum(r["fragile"] for r in flagged)
    assert f"{fragile} fragile under this path (generation margin below 1)" in done.stdout
    assert "NOT REPRODUCED" not in done.stdout


def test_every_disagreement_is_listed():
    row = {
        "doc_id": "d",
        "span_id": "s1",
        "token_start": 4,
        "target_ids": [1, 2, 3],
        "prompt": "p",
        "verify_engine": "vllm",
        "verify_dtype": "bfloat16",
    }
    checks = [
        Check(row, False, 1, 0.2, 1, True, False),
        Check({**row, "span_id": "s2"}, True, 3, 2.0, 0, False, False),
    ]
    lines = recheck_lines(
        Recheck({"engine": "hf", "dtype": "float32", "flags": {"device": "cpu"}}, 1.0, checks, [])
    )
    assert lines == [
        "NOT REPRODUCED d s1 tokens 4: 1/3 tokens matched under hf float32 on cpu; prompt 'p'",
        "1/2 flagged spans reproduce under hf float32 on cpu (the scan verified with vllm bfloat16)",
        "1 fragile under this path (generation margin below 1); smallest margin 0.2000 (s1 token 1)",
    ]


def test_model_file_roles():
    roles = {
        n: file_role(n)
        for n in (
            "model-00001-of-00002.safetensors",
            "model.safetensors.index.json",
            "tokenizer.json",
            "spiece.model",
            "config.json",
            "modeling_x.py",
            "README.md",
        )
    }
    assert roles == {
        "model-00001-of-00002.safetensors": "weight",
        "model.safetensors.index.json": "weight",
        "tokenizer.json": "tokenizer",
        "spiece.model": "tokenizer",
        "config.json": "config",
        "modeling_x.py": "code",
        "README.md": None,
    }
