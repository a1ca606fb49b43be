"""Library entry point of `acr-scan acr`: load once, validate every target, then measure each."""

from __future__ import annotations

import logging
from collections.abc import Iterator

from scanner import __version__
from scanner.config import CalibrationConfig, EngineConfig, ModelConfig, PromptConfig, SearchConfig
from scanner.engine import batched
from scanner.engine.build import build_engines
from scanner.engine.hf import HFEngine
from scanner.errors import InputError
from scanner.search.miniprompt import effective_cap
from scanner.search.miniprompt import measure_many as measure_targets
from scanner.search.progress import QUIET, SearchObserver
from scanner.search.request import Certificate, SearchRequest
from scanner.search.result import AcrResult

log = logging.getLogger(__name__)


def build_engine(
    model: ModelConfig, prompt: PromptConfig, engines: EngineConfig | None = None, draft: str | None = None
) -> HFEngine:
    return build_engines(model, prompt, engines or EngineConfig(), draft)


def validate_targets(engine: HFEngine, targets: list[dict], search: SearchConfig) -> None:
    """Every target is checked before the first search, so a bad one costs no finished work."""
    for number, target in enumerate(targets, 1):
        try:
            effective_cap(engine, len(engine.encode_target(target["text"])), search)
        except InputError as err:
            raise InputError(f"target {number} ({target['text'][:40]!r}): {err}") from err


def record(engine: HFEngine, result, model: ModelConfig) -> dict:
    out = result.to_dict()
    out.update(
        model=model.model,
        revision=model.revision,
        device=engine.device,
        dtype=engine.dtype,
        package_version=__version__,
    )
    if engine.draft is not None:
        out.update(draft_model=engine.draft_name, draft_load_s=round(engine.draft_load_s, 3))
    return out


def request(target: dict) -> SearchRequest:
    """A target {"text", "natural_prefix"?} as the search is asked it: the natural prefix a certificate."""
    prefix = target.get("natural_prefix")
    return SearchRequest(target["text"], known=Certificate(prefix) if prefix else None)


def measure_many(
    model: ModelConfig,
    prompt: PromptConfig,
    search: SearchConfig,
    targets: list[dict],
    engine: HFEngine | None = None,
    engines: EngineConfig | None = None,
    calibration: CalibrationConfig | None = None,
    observer: SearchObserver = QUIET,
) -> Iterator[dict]:
    """Records in the order of `targets`, each as soon as it and those before it are done; several
    targets share forwards where `engines.targets_per_forward` asks; memorized ones calibrated
    (stages/calibrate.py). An error stops the run. `observer` sees each search move (search/progress.py;
    its index: the target's)."""
    from scanner.stages.calibrate import calibrate_record

    calibration = calibration or CalibrationConfig(seed=search.seed)
    engines = engines or EngineConfig()
    owned = engine is None  # an engine built here is closed here: its threads, vLLM and references go with it
    engine = engine or build_engine(model, prompt, engines, search.gcg.draft.model)
    try:
        validate_targets(engine, targets, search)
        jobs = [(request(t), search) for t in targets]
        finished: dict[int, AcrResult] = {}
        emitted = 0
        for index, result in measure_targets(
            engine, jobs, batched.width(engine, engines.targets_per_forward), observer
        ):
            if isinstance(result, Exception):
                raise result
            finished[index] = result
            while emitted in finished:
                done = finished.pop(emitted)
                log.info(
                    "ACR %.2f (%s tokens -> %s) for %r",
                    done.acr,
                    done.target_tokens,
                    done.prompt_tokens,
                    done.target[:40],
                )
                yield calibrate_record(
                    engine,
                    record(engine, done, model),
                    calibration,
                    model=model,
                    prompt=prompt,
                    natural_prefix=targets[emitted].get("natural_prefix"),
                )
                emitted += 1
    finally:
        if owned:
            engine.close()
