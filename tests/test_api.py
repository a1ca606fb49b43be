"""The Python API against the real tiny model: `scanner.measure` finds a planted canary and not unseen text,
with the records `acr --json` prints; `scanner.scan` returns the table the command line writes for the same
configuration; bad input is refused before a model loads; docs/api.md's example runs as written."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from clirun import cli

import scanner
from scanner.api import target_dicts
from scanner.cli.demo import demo_corpus
from scanner.config import CorpusConfig, ModelConfig, ScanConfig
from scanner.errors import InputError
from scanner.schema import WALL_CLOCK
from scanner.studies.tiny import CANARIES

ROOT = Path(__file__).resolve().parents[1]
UNSEEN = "the water of the old house was cold"
SCAN = [
    "--span-tokens",
    "12",
    "--stride",
    "2",
    "--context-tokens",
    "16",
    "--docs-per-shard",
    "3",
    "--min-match-rate",
    "0.95",
    "--steps",
    "40",
    "--candidates",
    "64",
    "--top-k",
    "64",
    "--restarts",
    "0",
]


def comparable(table) -> list[dict]:
    """Rows by span_id without the wall-clock columns, which differ between any two runs."""
    rows = [{k: v for k, v in r.items() if k not in WALL_CLOCK} for r in table.to_pylist()]
    return sorted(rows, key=lambda r: r["span_id"])


def test_measure_finds_the_planted_canary_and_not_unseen_text(tiny_dir, fast_config):
    records = scanner.measure(
        [CANARIES[3], {"text": UNSEEN}],
        model=ModelConfig(model=str(tiny_dir), device="cpu"),
        search=fast_config,
    )
    assert [r["target"] for r in records] == [CANARIES[3], UNSEEN]
    canary, unseen = records
    assert canary["memorized"] and canary["verified_generation"] and canary["acr"] > 1
    assert not unseen["memorized"]
    assert canary["model"] == str(tiny_dir) and "calibrated_memorized" in canary
    json.dumps(records)  # what `acr --json` prints: plain JSON values a notebook turns into a DataFrame


def test_a_lone_string_is_one_text_and_a_bad_item_is_named():
    assert target_dicts("Call me Ishmael.") == [{"text": "Call me Ishmael."}]
    assert target_dicts([{"text": "a", "natural_prefix": "b"}]) == [{"text": "a", "natural_prefix": "b"}]
    with pytest.raises(InputError, match=r"text 2 is 5; pass a string, or a dict"):
        target_dicts(["a", 5])
    with pytest.raises(InputError, match=r"no text to measure"):
        target_dicts([])


def test_bad_input_is_refused_before_a_model_loads(tmp_path):
    with pytest.raises(InputError, match=r"/no/such/model"):
        scanner.measure(["hello"], model="/no/such/model")
    with pytest.raises(InputError, match=r"needs model="):
        scanner.scan(tmp_path / "corpus.parquet", tmp_path / "run")
    config = ScanConfig(corpus=CorpusConfig(path="c.parquet"), model=ModelConfig(model="m"))
    with pytest.raises(InputError, match=r"names its model already"):
        scanner.scan(config, tmp_path / "run", model="other")
    assert not (tmp_path / "run").exists()


def test_scan_returns_the_table_the_command_line_writes(tiny_dir, tmp_path):
    corpus = demo_corpus(tmp_path / "corpus.parquet")
    written = cli("scan", corpus, "--model", tiny_dir, "--out", tmp_path / "cli", *SCAN)
    assert written.returncode == 0, written.stderr
    result = scanner.scan(
        scanner.saved_config(tmp_path / "cli"), tmp_path / "api"
    )  # the config the CLI built
    assert result.run_dir == tmp_path / "api" and result.complete
    assert comparable(result.table) == comparable(pq.read_table(tmp_path / "cli" / "results"))
    assert result.table.equals(pq.read_table(tmp_path / "api" / "results"))
    memorized = {r["doc_id"] for r in result.table.to_pylist() if r["memorized"]}
    assert memorized == {"doc-0", "doc-1", "doc-2", "doc-3"}  # every planted canary
    assert result.passages is not None and result.passages.num_rows >= 4
    assert result.stats["status_counts"] == dict(Counter(result.table.column("status").to_pylist()))


def example(text: str) -> str:
    """The first ```python block of a page."""
    match = re.search(r"```python\n(.*?)```", text, re.DOTALL)
    assert match, "no python example"
    return match.group(1)


def test_the_documented_example_runs_as_written(tiny_dir, tmp_path):
    # As a reader runs it: a fresh interpreter in an empty folder, ~ a home whose cache holds the tiny model.
    home = tmp_path / "home"
    (home / ".cache" / "acr-scanner").mkdir(parents=True)
    (home / ".cache" / "acr-scanner" / "tiny").symlink_to(tiny_dir)
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "example.py").write_text(
        example((ROOT / "docs" / "api.md").read_text(encoding="utf-8"))
    )
    env = {
        **os.environ,
        "HOME": str(home),
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    out = subprocess.run(
        [sys.executable, "example.py"],
        capture_output=True,
        text=True,
        cwd=tmp_path / "work",
        env=env,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("True ") and lines[1].startswith(
        "False "
    )  # the canary, then the unseen sentence
    assert (
        lines[2].startswith("run True ")
        and "{'doc_id': 'book-1'" in out.stdout
        and "book-2" not in out.stdout
    )
