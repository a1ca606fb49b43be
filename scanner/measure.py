"""Library entry point of `acr-scan acr`: load once, validate every target, then measure each."""

from __future__ import annotations

import logging
from collections.abc import Iterator

from scanner import __version__
from scanner.config import EngineConfig, ModelConfig, PromptConfig, SearchConfig
from scanner.engine.build import build_engines
from scanner.engine.hf import HFEngine
from scanner.errors import InputError
from scanner.search.miniprompt import effective_cap, measure

log = logging.getLogger(__name__)


def build_engine(model: ModelConfig, prompt: PromptConfig, engines: EngineConfig | None = None) -> HFEngine:
    return build_engines(model, prompt, engines or EngineConfig())


def validate_targets(engine: HFEngine, targets: list[dict], search: SearchConfig) -> None:
    """Every target is checked before the first search, so a bad one costs no finished work."""
    for number, target in enumerate(targets, 1):
        try:
            effective_cap(engine, len(engine.encode_target(target["text"])), search)
        except InputError as err:
            raise InputError(f"target {number} ({target['text'][:40]!r}): {err}") from err


def record(engine: HFEngine, result, model: ModelConfig) -> dict:
    out = result.to_dict()
    out.update(model=model.model, revision=model.revision, device=engine.device, dtype=engine.dtype,
               package_version=__version__)
    return out


def measure_many(model: ModelConfig, prompt: PromptConfig, search: SearchConfig,
                 targets: list[dict], engine: HFEngine | None = None,
                 engines: EngineConfig | None = None) -> Iterator[dict]:
    engine = engine or build_engine(model, prompt, engines)
    validate_targets(engine, targets, search)
    for target in targets:
        result = measure(engine, target["text"], search, natural_prefix=target.get("natural_prefix"))
        log.info("ACR %.2f (%s tokens -> %s) for %r", result.acr, result.target_tokens,
                 result.prompt_tokens, target["text"][:40])
        yield record(engine, result, model)
