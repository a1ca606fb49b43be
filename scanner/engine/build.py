"""The engines of a run, built in one process (one GPU actor on a cluster holds both).

Order matters on a GPU: vLLM first, with an explicit share of the GPU (gpu_memory_utilization of the
*total* memory, for its weights, activations and KV cache; it refuses to start when that much is not
free), then the HF model, whose GCG batches are sized from the memory still free (batched.initial_chunk).
Built the other way round, vLLM would find the HF model's memory taken and fail or starve.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging

from scanner.config import EngineConfig, ModelConfig, PromptConfig
from scanner.engine.check import check_model
from scanner.engine.draft import attach_draft
from scanner.engine.hf import HFEngine
from scanner.engine.loading import load_model, resolve_device, resolve_dtype

log = logging.getLogger(__name__)


def build_engines(
    model: ModelConfig, prompt: PromptConfig, engines: EngineConfig, draft: str | None = None
) -> HFEngine:
    """The HF engine (gradients, candidate scores, margins) with vLLM attached where `engines` asks,
    and `draft` (probe sampling's draft model, HF on the same device) attached when given."""
    check_model(model)  # a wrong or damaged local model fails here, named, before vLLM reads it
    engines = resolve_engines(engines, model)
    fast = None
    if engines.uses_vllm:
        from scanner.engine.vllm import VLLMEngine

        device = resolve_device(model.device)
        dtype = str(resolve_dtype(model.dtype, device)).removeprefix("torch.")
        fast = VLLMEngine(model, engines, dtype, device).setup()
    engine = HFEngine(load_model(model), prompt)
    engine.attach(fast, verify=engines.verify == "vllm", screen=engines.screen == "vllm")
    log.info("verify engine: %s; screen engine: %s", engines.verify, engines.screen)
    if draft is not None:
        attach_draft(engine, model, draft, prompt)
    return engine


def resolve_engines(engines: EngineConfig, model: ModelConfig) -> EngineConfig:
    """ "auto" -> vllm where vLLM is installed, a GPU is visible and the model is not a .gguf file
    (vLLM loads HF directories and hub ids here); else hf. Decided on the machine that runs the
    shard, so it lives with the engines, not in the config."""
    if "auto" not in (engines.verify, engines.screen):
        return engines
    default = "vllm" if _vllm_fits(model) else "hf"
    return dataclasses.replace(
        engines,
        verify=default if engines.verify == "auto" else engines.verify,
        screen=default if engines.screen == "auto" else engines.screen,
    )


def _vllm_fits(model: ModelConfig) -> bool:
    if model.device == "cpu" or model.model.endswith(".gguf") or importlib.util.find_spec("vllm") is None:
        return False
    import torch

    return torch.cuda.is_available()
