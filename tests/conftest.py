"""Shared fixtures: the tiny memorizing model is trained once per test session (about 20 s on 2 cores)
and loaded through the same --model path a user passes."""

from __future__ import annotations

import os

import pytest

from scanner.config import GCGConfig, ModelConfig, PromptConfig, SearchConfig
from scanner.tiny import build_tiny

# The demo's CPU-sized search: small candidate batches, short budgets.
FAST = SearchConfig(decide_steps=150, shrink_steps=80, restarts=1,
                    gcg=GCGConfig(top_k=64, num_candidates=96, patience=40))


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    # ACR_TINY_DIR: a folder to reuse across sessions (build_tiny retrains when its spec changed).
    return build_tiny(os.environ.get("ACR_TINY_DIR") or tmp_path_factory.mktemp("tiny"))


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
