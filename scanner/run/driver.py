"""The corpus scan driver: validate, prepare the run directory, run the phases on an executor, merge
the stats. The one entry point of a scan (the CLI, bench/ and tests call `run_scan`).

Validation of the corpus and of the run directory happens before any model loads, so a bad input
costs seconds, not a model load; a relaunch of the same command resumes from the completion markers
of every phase (scanner/run/phases.py), under either executor (they give equal tables). The driver
picks the executor and the worker it runs; the executor only decides where each task runs.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from functools import partial

from scanner.config import ExecutorConfig, PassageConfig, ScanConfig
from scanner.engine.check import check_model, check_template
from scanner.engine.draft import check_draft
from scanner.engine.positions import declared_positions, fit_context
from scanner.executors.local import LocalExecutor
from scanner.run.model_record import ModelRecord, has_finished, record_model, write_record
from scanner.run.phases import Phases, run_phases
from scanner.run.tasks import Worker, heartbeat_name
from scanner.stages.read import Corpus, open_corpus
from scanner.storage.atomic import atomic_write_json
from scanner.storage.lock import run_lock
from scanner.storage.progress import clear_stale, progress_path, record_given_up
from scanner.storage.rundir import Plan, RunDir

log = logging.getLogger(__name__)


def run_scan(config: ScanConfig, out: str, progress=None, executor: ExecutorConfig | None = None,
             corpus: Corpus | None = None, passages: PassageConfig | None = None, draw=None) -> dict:
    """Scan the corpus into `out`, passages.parquet included; returns the merged stats with the
    executor's report under "run" (failed shards, actor restarts, and "failed_rows": {unit kind: spans
    whose search or check failed}, which a relaunch retries). Raises stop.Stopped on a stop request
    (scanner/stop.py), the lock released. `progress(stats)` is called per
    screened shard, and `progress.start(documents)` first, where it has one, with the documents still
    to screen; `corpus`: the corpus already opened and validated by the caller; `draw`: `acr-scan plan`'s
    sample of the search (scanner/run/phases.py)."""
    executor = executor or ExecutorConfig()
    config = fit_positions(config)
    corpus = corpus or validate(config, out)
    with run_lock(out):  # before prepare, which deletes temp files a live writer owns
        run = RunDir(out)
        # Hashed before prepare, which seals the files' digest into the run's identity; checked against a
        # relaunched run's record first, so a refusal names the files that differ.
        model = record_model(run.path, config.model, has_finished(run))
        plan = run.prepare(config.to_dict(), corpus.fingerprint(), corpus.num_rows, config.docs_per_shard, model.digest)
        write_record(run.path, model)  # before any worker loads it: the run's identity is its bytes
        for name in clear_stale(run.path):  # under the lock: no unit runs yet, each file is a stopped worker's
            log.warning("progress/%s: left by a worker that stopped (the run was killed); removed, its unit "
                        "is rerun where it is not done", name)
        phases = Phases(config, run, plan, corpus, passages, draw)
        _announce(phases, progress)
        execute = open_executor(executor, config, run, plan, corpus, model)
        try:
            failed = run_phases(phases, execute, progress)
        finally:
            report = execute.close()
        return {**run.merge_stats(), "run": {**report, "failed_shards": failed, "failed_rows": phases.failed_rows()}}


def validate(config: ScanConfig, out: str) -> Corpus:
    """Every check that needs no run directory, before one is made or locked."""
    RunDir(out).require_own_folder()  # the path's own checks (empty, object-store URI), no others' files in it
    corpus = open_corpus(config.corpus)
    check_model(config.model)  # a bad --model leaves no run directory to refuse the corrected command
    check_template(config.model, config.prompt)  # likewise a template that cannot score a first token
    if config.search.gcg.draft.enabled:  # likewise a draft of another tokenizer
        check_draft(config.model, config.search.gcg.draft.model)
    return corpus


def fit_positions(config: ScanConfig) -> ScanConfig:
    """The config with --context-tokens capped to the model's positions (a refusal where the span itself
    cannot fit). Capped before the run directory records the config, so a relaunch of the same command
    caps alike and resumes."""
    positions = declared_positions(config.model.model)
    asked = config.screen.context_tokens
    context = fit_context(config.spans.span_tokens, asked, config.search.tau, positions)
    if context == asked:
        return config
    log.warning("--context-tokens %d capped to %d: the model has %d positions, which must hold the context, "
                "two %d-token spans (the screen's stream advances a span a chunk) and BOS", asked, context,
                positions, config.spans.span_tokens)
    return replace(config, screen=replace(config.screen, context_tokens=context))


def _announce(phases: Phases, progress) -> None:
    pending = phases.screen_pending()
    log.info("%d of %d shards still to screen in %s", len(pending), len(phases.plan), phases.run.path)
    start = getattr(progress, "start", None)
    if start is not None:
        start(sum(s.num_docs for s in pending))


def open_executor(executor: ExecutorConfig, config: ScanConfig, run: RunDir, plan: Plan, corpus: Corpus,
                  model: ModelRecord):
    """The executor that runs the phases' tasks, each on a Worker of this scan."""
    on_setup = partial(write_provenance, run, {"model_hash_s": round(model.seconds, 3)})
    if executor.kind == "local":  # the driver's corpus, already open; one model load in this process
        return LocalExecutor(lambda: Worker(config, str(run.path), corpus, model.seen), on_setup)
    from scanner.executors.ray import RayExecutor  # Ray is imported only when asked for

    # Actors open the corpus themselves from shared storage: the factory pickles configs and paths only.
    return RayExecutor(executor, partial(Worker, config, str(run.path.resolve())), on_setup,
                       expected_tasks=len(plan), beat_path=partial(beat_path, run.path),
                       on_given_up=partial(record_given_up, run.path))


def beat_path(run_path, task):
    """A task's heartbeat file, which the Ray driver watches (executors/liveness.py)."""
    return progress_path(run_path, heartbeat_name(task))


def write_provenance(run: RunDir, driver: dict, meta: dict[str, str]) -> None:
    # Model and tokenizer identities are known only once loaded: beside run_config.json; `driver`: what
    # the driver measured (the seconds its hashing of the model's files took).
    atomic_write_json(run.path / "provenance.json", {**meta, **{k: str(v) for k, v in driver.items()}})
