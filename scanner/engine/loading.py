"""Model loading: a hub id, a local HF directory or a .gguf file, with explicit device and dtype."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scanner.config import ModelConfig
from scanner.errors import InputError

log = logging.getLogger(__name__)


@dataclass
class LoadedModel:
    model: Any
    tokenizer: Any
    device: str
    dtype: str
    source: str  # "gguf", "local" or "hub"
    adds_bos: bool | None = None  # the file's own BOS flag where the loaded tokenizer forgets it (GGUF)
    threads_before: int | None = None  # torch's thread count before --threads set it: restored on close


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise InputError(f"--device {device} asked for CUDA but no GPU is visible; pass --device cpu")
    return device


def resolve_dtype(dtype: str, device: str):
    import torch

    if dtype == "auto":
        # bf16 is the GPU's fast path; on CPU fp32 keeps greedy decoding free of rounding ties.
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    return getattr(torch, dtype)


def model_source(name: str) -> str:
    path = Path(name)
    if name.endswith(".gguf"):
        if not path.is_file():
            raise InputError(f"--model {name}: no such .gguf file; check the path")
        return "gguf"
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise InputError(f"--model {name}: the directory has no config.json; pass an HF model directory")
        return "local"
    if path.exists() or name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise InputError(f"--model {name}: not a model directory or .gguf file; check the path")
    return "hub"


def _pretrained_args(config: ModelConfig, source: str) -> tuple[str, dict]:
    kwargs: dict[str, Any] = {"trust_remote_code": config.trust_remote_code}
    if config.revision:
        kwargs["revision"] = config.revision
    if source == "gguf":
        path = Path(config.model)
        return str(path.parent), {**kwargs, "gguf_file": path.name}
    return config.model, kwargs


def load_model(config: ModelConfig) -> LoadedModel:
    import torch
    from safetensors import SafetensorError
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # progress belongs to the driver, not to every model load
    source = model_source(config.model)
    device = resolve_device(config.device)
    dtype = resolve_dtype(config.dtype, device)
    where, kwargs = _pretrained_args(config, source)
    try:
        tokenizer = AutoTokenizer.from_pretrained(where, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(where, dtype=dtype, **kwargs)
    except OSError as err:
        hint = (
            " (a hub id: pass --model DIR, a folder with its files, where the hub cannot serve it)"
            if source == "hub"
            else ""
        )
        raise InputError(f"--model {config.model}: cannot load it{hint}: {err}") from err
    except (ValueError, RuntimeError, KeyError, EOFError, SafetensorError) as err:
        if isinstance(err, torch.OutOfMemoryError):
            raise
        # Files whose headers check out but do not fit each other (config.json against the weights, an
        # architecture this transformers does not know): the model's fault, not an internal error.
        raise InputError(
            f"--model {config.model}: transformers cannot load it ({type(err).__name__}: "
            f"{brief(err, 400)}); restore the model's files from its source "
            "(config.json and the weights must belong together), or upgrade transformers if it "
            "does not know the architecture"
        ) from err
    model.to(device).eval().requires_grad_(False)
    log.info("loaded %s (%s) on %s as %s", config.model, source, device, dtype)
    threads_before = torch.get_num_threads() if config.threads else None
    if config.threads:  # torch's pool is the process's: set once loaded, given back by the engine's close()
        torch.set_num_threads(config.threads)
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        device=device,
        dtype=str(dtype).removeprefix("torch."),
        source=source,
        adds_bos=gguf_adds_bos(config.model) if source == "gguf" else None,
        threads_before=threads_before,
    )


def load_tokenizer(config: ModelConfig):
    """(tokenizer, the file's own BOS flag or None) without the weights: what the input of a prompt
    string is built from (engine/recipe.py)."""
    from transformers import AutoTokenizer

    source = model_source(config.model)
    where, kwargs = _pretrained_args(config, source)
    try:
        tokenizer = AutoTokenizer.from_pretrained(where, **kwargs)
    except (OSError, ValueError) as err:
        raise InputError(f"--model {config.model}: cannot load its tokenizer: {brief(err, 400)}") from err
    return tokenizer, gguf_adds_bos(config.model) if source == "gguf" else None


def stop_ids(config: ModelConfig) -> list[int]:
    """The EOS ids greedy generation stops at, as the loaded model's generation_config holds them:
    generation_config.json, else what the model's config.json says."""
    from transformers import AutoConfig, GenerationConfig

    where, kwargs = _pretrained_args(config, model_source(config.model))
    try:
        generation = GenerationConfig.from_pretrained(where, **kwargs)
    except OSError:
        generation = GenerationConfig.from_model_config(AutoConfig.from_pretrained(where, **kwargs))
    eos = generation.eos_token_id
    return [] if eos is None else [eos] if isinstance(eos, int) else list(eos)


def brief(err: Exception, limit: int = 300) -> str:
    """An exception's message on one line, cut to `limit` characters (library errors run long)."""
    text = " ".join(str(err).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def gguf_adds_bos(path: str) -> bool | None:
    """tokenizer.ggml.add_bos_token of a GGUF file: transformers (5.19) drops it when it builds the
    tokenizer, so a GGUF model would silently lose the BOS its runtime (llama.cpp) always adds."""
    from gguf import GGUFReader

    field = GGUFReader(path).fields.get("tokenizer.ggml.add_bos_token")
    return None if field is None else bool(field.parts[field.data[0]][0])
