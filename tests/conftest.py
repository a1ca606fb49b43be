"""Shared fixtures: the tiny memorizing model is trained once per test run (about 20 s on 2 cores),
shared by the pytest-xdist workers, and loaded through the same --model path a user passes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from filelock import FileLock

from scanner.config import GCGConfig, ModelConfig, PromptConfig, SearchConfig
from scanner.studies.tiny import build_tiny

# The demo's CPU-sized search: small candidate batches, short budgets.
FAST = SearchConfig(
    decide_steps=150, shrink_steps=80, restarts=1, gcg=GCGConfig(top_k=64, num_candidates=96, patience=40)
)


# The recall audit (--audit-sample, by default searches worth 25 % of the search's seconds) adds searches
# after every scan whose count follows measured seconds, so the tests' tables would vary with the load.
# Scans here run without it unless a test asks (tests/test_audit.py and tests/test_hostile_recall.py run
# it; tests/test_guides.py the default); the CLI reads this variable as the option's default, and the
# processes tests start inherit it.
os.environ["ACR_AUDIT_SAMPLE"] = "0"

if os.environ.get("PYTEST_XDIST_WORKER"):
    # Two workers on two cores: one thread each (also for the CLI processes they start). The tiny
    # model's small kernels gain little from a second thread; a second test running beside gains more.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """ACR_TINY_DIR: a folder to reuse across runs (build_tiny retrains when its spec changed); else
    one folder for every xdist worker of this run, built by whichever asks first."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # pytest-N/, above each worker's popen-gwK/
    where = Path(os.environ.get("ACR_TINY_DIR") or shared / "tiny")
    where.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(where) + ".lock"):
        return build_tiny(where)


@pytest.fixture(scope="session")
def loaded(tiny_dir):
    from scanner.engine.loading import load_model

    return load_model(ModelConfig(model=str(tiny_dir), device="cpu"))


@pytest.fixture(scope="session")
def engine(loaded):
    from scanner.engine.hf import HFEngine

    return HFEngine(loaded, PromptConfig())


@pytest.fixture(scope="session")
def fast_config():
    return FAST
