"""The Python API: what `acr-scan acr` and `acr-scan scan` do, as calls a notebook or a pipeline makes.

    import scanner
    records = scanner.measure(["Call me Ishmael."], model="path/to/model")
    result = scanner.scan("corpus.parquet", "run/", model="path/to/model")
    result.table  # the results table, a row per span

Both take the frozen configs the command line builds (scanner/config.py), or plain keywords for the
common case; the commands are this module behind option parsing and printing. Heavy libraries (torch,
transformers) load on the first call, not on `import scanner`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from scanner.config import (
    CalibrationConfig,
    CorpusConfig,
    EngineConfig,
    ExecutorConfig,
    ModelConfig,
    PassageConfig,
    PromptConfig,
    ScanConfig,
    SearchConfig,
)
from scanner.errors import InputError

if TYPE_CHECKING:
    import pyarrow as pa

    from scanner.search.progress import SearchObserver

__all__ = ["ScanResult", "measure", "measure_iter", "saved_config", "scan"]


def measure(
    texts: str | Iterable[str | dict],
    model: str | ModelConfig,
    *,
    prompt: PromptConfig | None = None,
    search: SearchConfig | None = None,
    engines: EngineConfig | None = None,
    calibration: CalibrationConfig | None = None,
    observer: SearchObserver | None = None,
) -> list[dict]:
    """The ACR of each text against `model`: one record per text, in order, as `acr-scan acr --json`
    prints them (target, acr, memorized, prompt, prompt_tokens, verified_generation, calibrated_memorized,
    ...). A text is a string, or a dict {"text": ..., "natural_prefix": ...} (a known preceding prompt).
    `model`: a hub id, local directory or .gguf file, or a ModelConfig; the other configs default to the
    command line's defaults. Every text and the model are checked before the first search."""
    return list(
        measure_iter(
            texts,
            model,
            prompt=prompt,
            search=search,
            engines=engines,
            calibration=calibration,
            observer=observer,
        )
    )


def measure_iter(
    texts: str | Iterable[str | dict],
    model: str | ModelConfig,
    *,
    prompt: PromptConfig | None = None,
    search: SearchConfig | None = None,
    engines: EngineConfig | None = None,
    calibration: CalibrationConfig | None = None,
    observer: SearchObserver | None = None,
) -> Iterator[dict]:
    """`measure`'s records one at a time, each as soon as it and those before it are done (a long list of
    texts shows its first results early). Bad input raises here, before the first record is asked for."""
    from scanner.engine.check import check_model

    targets = target_dicts(texts)
    model = model_config(model)
    search = search or SearchConfig()
    check_model(model)  # a bad path fails in a moment, before torch and transformers load
    check_reference(calibration)
    if search.gcg.draft.enabled:
        from scanner.engine.draft import check_draft

        check_draft(model, search.gcg.draft.model)
    return _records(
        model,
        prompt or PromptConfig(),
        search,
        targets,
        engines or EngineConfig(screen="hf"),
        calibration,
        observer,
    )


def _records(model, prompt, search, targets, engines, calibration, observer) -> Iterator[dict]:
    from scanner.run.measure import measure_many
    from scanner.search.progress import QUIET

    yield from measure_many(
        model, prompt, search, targets, engines=engines, calibration=calibration, observer=observer or QUIET
    )


def target_dicts(texts: str | Iterable[str | dict]) -> list[dict]:
    """Texts as measure_many's targets; a lone string is one text (never its characters)."""
    items = [texts] if isinstance(texts, str) else list(texts)
    targets = []
    for number, item in enumerate(items, 1):
        target = {"text": item} if isinstance(item, str) else item
        if not isinstance(target, dict) or not isinstance(target.get("text"), str):
            raise InputError(
                f"text {number} is {item!r:.60}; pass a string, or a dict like "
                "{'text': '...', 'natural_prefix': '...'}"
            )
        targets.append(target)
    if not targets:
        raise InputError(
            "no text to measure; pass a list of strings, e.g. measure(['Call me Ishmael.'], model=...)"
        )
    return targets


def model_config(model: str | os.PathLike | ModelConfig) -> ModelConfig:
    if isinstance(model, ModelConfig):
        return model
    if isinstance(model, str | os.PathLike):
        return ModelConfig(model=os.fspath(model))
    raise InputError(
        f"model {model!r:.60} is neither a path or hub id nor a ModelConfig; pass e.g. "
        "model='HuggingFaceTB/SmolLM2-135M' or model=ModelConfig(model=..., device='cpu')"
    )


@dataclass(frozen=True)
class ScanResult:
    """What `scan` returns: the run directory, the run's merged stats, and its tables read from the run
    directory when first asked for (a large run's results are never read unless wanted)."""

    run_dir: Path
    stats: dict = field(repr=False)

    @cached_property
    def table(self) -> pa.Table:
        """The results table, a row per span: what `acr-scan scan` writes to RUN_DIR/results."""
        from scanner.storage.rundir import RunDir

        return RunDir(self.run_dir).read_results()

    @cached_property
    def passages(self) -> pa.Table | None:
        """The memorized passages (passages.parquet), or None where the run has not built them."""
        from scanner.storage.passages import passages_if_built
        from scanner.storage.rundir import RunDir

        return passages_if_built(RunDir(self.run_dir))

    @property
    def failed_units(self) -> dict:
        """Shards or search units that failed after their retries (they stay pending: scan again)."""
        return self.stats["run"]["failed_shards"]

    @property
    def failed_rows(self) -> dict[str, int]:
        """Spans whose search or check failed, by phase (their rows say why; scanning again retries them)."""
        return self.stats["run"]["failed_rows"]

    @property
    def complete(self) -> bool:
        """Every span has its row and none failed (the command line's exit 0)."""
        return not self.failed_units and not self.failed_rows


def scan(
    corpus: str | os.PathLike | ScanConfig,
    out: str | os.PathLike,
    *,
    model: str | ModelConfig | None = None,
    executor: ExecutorConfig | None = None,
    passages: PassageConfig | None = None,
    progress: Callable[[dict], None] | None = None,
) -> ScanResult:
    """Scan a Parquet corpus into the run directory `out`, as `acr-scan scan` does; scanning into the same
    `out` again resumes. `corpus`: a Parquet file, folder or glob with `model=` (every other setting at its
    default), or a whole ScanConfig (which names its model). `executor`: where tasks run (default: this
    process); `passages`: the passages table's settings; `progress(stats)`: called per screened shard.
    Raises InputError for bad input, before any model loads."""
    config = scan_config(corpus, model)
    check_reference(config.calibration)
    from scanner.run.driver import run_scan

    stats = run_scan(config, os.fspath(out), progress=progress, executor=executor, passages=passages)
    return ScanResult(run_dir=Path(out), stats=stats)


def scan_config(corpus: str | os.PathLike | ScanConfig, model: str | ModelConfig | None) -> ScanConfig:
    if isinstance(corpus, ScanConfig):
        if model is not None:
            raise InputError(
                "scan(config, ..., model=...): the ScanConfig names its model already; drop model=, "
                "or set it in the config with dataclasses.replace(config, model=ModelConfig(...))"
            )
        return corpus
    if model is None:
        raise InputError(
            f"scan({os.fspath(corpus)!r}, ...) needs model=: a hub id, local directory or .gguf file, "
            "or a ModelConfig"
        )
    return ScanConfig(corpus=CorpusConfig(path=os.fspath(corpus)), model=model_config(model))


def check_reference(calibration: CalibrationConfig | None) -> None:
    """A wrong or damaged reference model is named now, before anything is loaded or written."""
    if calibration is None or not calibration.reference_model:
        return
    from scanner.engine.check import check_model

    try:
        check_model(ModelConfig(model=calibration.reference_model))
    except InputError as err:
        raise InputError(f"--reference-model: {err}") from err


def saved_config(run_dir: str | os.PathLike) -> ScanConfig:
    """The ScanConfig a run directory was made with (its run_config.json, checked), e.g. to scan another
    corpus the same way: scan(dataclasses.replace(saved_config('run/'), corpus=...), 'run2/')."""
    from scanner.storage.rundir import RunDir

    run = RunDir(run_dir)
    run.require_run()
    return run.scan_config()
