"""CUDA checks, run on a GPU machine by bench/gpu_check.sh (`pytest -m gpu`); skipped markers elsewhere."""

import pytest
import torch

from scanner.config import ModelConfig, PromptConfig
from scanner.engine.batched import TargetScorer
from scanner.engine.hf import HFEngine
from scanner.engine.loading import load_model
from scanner.search.miniprompt import measure
from scanner.studies.tiny import CANARIES

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cuda_engine(tiny_dir):
    if not torch.cuda.is_available():
        pytest.fail("the gpu tests need CUDA; run them through bench/gpu_check.sh on a GPU machine")
    loaded = load_model(ModelConfig(model=str(tiny_dir)))  # auto: cuda, bf16
    assert loaded.device == "cuda" and loaded.dtype == "bfloat16"
    return HFEngine(loaded, PromptConfig())


def test_canaries_memorized_on_gpu_in_bf16(cuda_engine, fast_config):
    for canary in CANARIES:
        result = measure(cuda_engine, canary, fast_config)
        assert result.memorized and result.verified_generation, canary


def test_gpu_scores_agree_with_cpu(cuda_engine, engine):
    ids = engine.encode_target(CANARIES[2])
    prompts = torch.tensor(engine.allowed_ids[:64]).view(32, 2)
    cpu = TargetScorer(engine, ids, "ce").score(prompts)
    gpu = TargetScorer(cuda_engine, ids, "ce").score(prompts)
    assert torch.allclose(cpu.loss, gpu.loss, atol=0.1, rtol=0.05)  # bf16 against fp32


def test_several_targets_per_forward_on_gpu(cuda_engine, fast_config):
    from scanner.engine import batched
    from scanner.search.miniprompt import measure_many
    from scanner.search.request import SearchRequest

    assert batched.supported(cuda_engine)
    gen = torch.Generator().manual_seed(0)
    pool = torch.tensor(cuda_engine.allowed_ids)
    items = [
        (
            TargetScorer(cuda_engine, cuda_engine.encode_target(c), "ce"),
            pool[torch.randint(len(pool), (16, 2 + i), generator=gen)],
        )
        for i, c in enumerate(CANARIES)
    ]
    alone = [s.score(c) for s, c in items]
    for a, b in zip(alone, batched.scores(cuda_engine, items), strict=True):
        assert torch.allclose(a.loss, b.loss, atol=0.05, rtol=0.02)  # bf16 kernels of other shapes
    results = dict(measure_many(cuda_engine, [(SearchRequest(c), fast_config) for c in CANARIES], width=4))
    assert all(r.memorized and r.verified_generation for r in results.values())
