"""What a measurement sets in the process is given back when its engine closes: torch's thread count
(--threads) and the reference models it loaded (vLLM's environment: tests/test_vllm.py); a notebook or
a pipeline that calls the package twice finds the process as it was."""

import torch

from scanner.config import EngineConfig, ModelConfig, PromptConfig
from scanner.engine.build import build_engines
from scanner.stages.calibrate import reference_engine


def test_threads_and_reference_models_go_with_the_engine(tiny_dir):
    before = torch.get_num_threads()
    wanted = 1 if before != 1 else 2
    model = ModelConfig(model=str(tiny_dir), device="cpu", threads=wanted)
    engine = build_engines(model, PromptConfig(), EngineConfig(verify="hf", screen="hf"))
    assert torch.get_num_threads() == wanted, "--threads holds while the engine measures"
    reference = reference_engine(engine, model, str(tiny_dir), PromptConfig())
    assert reference_engine(engine, model, str(tiny_dir), PromptConfig()) is reference, (
        "R loads once per engine"
    )
    engine.close()
    assert torch.get_num_threads() == before, "the engine's close gives torch's thread count back"
    assert engine.references == {}, "the reference models loaded for it are closed and dropped with it"
