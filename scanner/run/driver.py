"""The one driver of a run folder (`drive`): validate, lock, record the model's bytes, open the job's
plan, run its tasks on an executor, close it. A scan (`run_scan`, ScanJob: the phases, then the merged
stats) and a comparison (run/compare.py) are its jobs; the CLI, the Python API, bench/ and tests call
`run_scan` and `run_compare`.

Validation of the corpus and of the run directory happens before any model loads, so a bad input
costs seconds, not a model load; a relaunch of the same command resumes from the completion markers
of every phase (scanner/run/phases.py), under either executor (they give equal tables). The driver
picks the executor and the worker it runs; the executor only decides where each task runs.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from scanner.config import ExecutorConfig, ModelConfig, PassageConfig, ScanConfig
from scanner.engine.check import check_model, check_template
from scanner.engine.draft import check_draft
from scanner.engine.positions import declared_positions, fit_context
from scanner.executors.local import LocalExecutor
from scanner.run.model_record import ModelRecord, has_finished, record_model, write_record
from scanner.run.phases import Phases, run_phases
from scanner.run.tasks import Worker, heartbeat_name
from scanner.run.worker import ModelWorker
from scanner.stages.read import Corpus, open_corpus
from scanner.storage.atomic import atomic_write_json
from scanner.storage.lock import run_lock
from scanner.storage.progress import clear_stale, progress_path, record_given_up
from scanner.storage.rundir import RunDir

if TYPE_CHECKING:
    from scanner.executors import Executor

log = logging.getLogger(__name__)


class Job(Protocol):
    """What `drive` runs in a run folder: a scan (ScanJob) or a comparison (run/compare.py CompareJob)."""

    command: str  # whose folder it is ("scan", "compare"): how model.json's refusals name it
    model: ModelConfig  # the model the folder records the bytes of and its workers load
    worker: type[ModelWorker]  # made as worker(config, out, corpus, seen) where a task runs
    config: object  # the worker's frozen config (plain data: Ray actors get it pickled)
    corpus: Corpus | None  # the corpus validate() opened, for a worker in the driver's process

    def validate(self, out: str) -> None:
        """Every check that needs no folder, before one is made or locked or a model loads."""

    def finished(self, folder: Path) -> bool:
        """Whether anything of the run is committed (a relaunch must then load the recorded model bytes)."""

    def open(self, folder: Path, model: ModelRecord) -> int:
        """Under the lock, before model.json is written: the folder's identity checked or sealed, its plan
        made; returns how many tasks it may run at once at most (Ray starts no more actors)."""

    def run(self, execute: Executor) -> dict:
        """Every task on `execute`; returns the tasks that failed for good."""

    def result(self, folder: Path, failed: dict, report: dict) -> dict:
        """What the command returns once the tasks ran (`report`: the executor's)."""


def drive(job: Job, out: str, executor: ExecutorConfig | None = None) -> dict:
    """The one driver of a run folder: validate, lock, record the model's bytes, open the job's plan,
    run its tasks on the executor, close it, return the job's result. A job's run raises stop.Stopped
    on a stop request (scanner/stop.py): the lock is released, the tasks not run stay pending."""
    job.validate(out)
    folder = Path(out)
    with run_lock(folder):  # before open, which deletes temp files a live writer owns
        # Hashed before open, which seals the files' digest into the run's identity; checked against a
        # relaunched run's record first, so a refusal names the files that differ.
        model = record_model(folder, job.model, job.finished(folder), command=job.command)
        expected = job.open(folder, model)
        write_record(folder, model)  # before any worker loads it: the run's identity is its bytes
        execute = open_executor(executor or ExecutorConfig(), job, folder, model, expected)
        try:
            failed = job.run(execute)
        finally:
            report = execute.close()
        return job.result(folder, failed, report)


def run_scan(
    config: ScanConfig,
    out: str,
    progress=None,
    executor: ExecutorConfig | None = None,
    corpus: Corpus | None = None,
    passages: PassageConfig | None = None,
    draw=None,
) -> dict:
    """Scan the corpus into `out`, passages.parquet included; returns the merged stats with the
    executor's report under "run" (failed shards, actor restarts, and "failed_rows": {unit kind: spans
    whose search or check failed}, which a relaunch retries). Raises stop.Stopped on a stop request
    (scanner/stop.py), the lock released. `progress(stats)` is called per screened shard, and
    `progress.start(documents)` first, where it has one, with the documents still to screen; `corpus`:
    the corpus already opened and validated by the caller; `draw`: `acr-scan plan`'s sample of the
    search (scanner/run/phases.py)."""
    return drive(ScanJob(fit_positions(config), progress, corpus, passages, draw), out, executor)


class ScanJob:
    """A scan as `drive` runs it: the phases (run/phases.py) over the run directory's plan."""

    command, worker = "scan", Worker

    def __init__(
        self,
        config: ScanConfig,
        progress=None,
        corpus: Corpus | None = None,
        passages: PassageConfig | None = None,
        draw=None,
    ) -> None:
        self.config, self.model = config, config.model
        self.progress, self.corpus, self.passages, self.draw = progress, corpus, passages, draw
        self.phases: Phases | None = None

    def validate(self, out: str) -> None:
        self.corpus = self.corpus or validate(self.config, out)

    def finished(self, folder: Path) -> bool:
        return has_finished(RunDir(folder))

    def open(self, folder: Path, model: ModelRecord) -> int:
        run, config = RunDir(folder), self.config
        plan = run.prepare(
            config.to_dict(),
            self.corpus.fingerprint(),
            self.corpus.num_rows,
            config.docs_per_shard,
            model.digest,
        )
        for name in clear_stale(
            run.path
        ):  # under the lock: no unit runs yet, each file is a stopped worker's
            log.warning(
                "progress/%s: left by a worker that stopped (the run was killed); removed, its unit "
                "is rerun where it is not done",
                name,
            )
        self.phases = Phases(config, run, plan, self.corpus, self.passages, self.draw)
        _announce(self.phases, self.progress)
        return len(plan)

    def run(self, execute: Executor) -> dict:
        return run_phases(self.phases, execute, self.progress)

    def result(self, folder: Path, failed: dict, report: dict) -> dict:
        return {
            **self.phases.run.merge_stats(),
            "run": {**report, "failed_shards": failed, "failed_rows": self.phases.failed_rows()},
        }


def validate(config: ScanConfig, out: str) -> Corpus:
    """Every check that needs no run directory, before one is made or locked."""
    RunDir(
        out
    ).require_own_folder()  # the path's own checks (empty, object-store URI), no others' files in it
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
    log.warning(
        "--context-tokens %d capped to %d: the model has %d positions, which must hold the context, "
        "two %d-token spans (the screen's stream advances a span a chunk) and BOS",
        asked,
        context,
        positions,
        config.spans.span_tokens,
    )
    return replace(config, screen=replace(config.screen, context_tokens=context))


def _announce(phases: Phases, progress) -> None:
    pending = phases.screen_pending()
    log.info("%d of %d shards still to screen in %s", len(pending), len(phases.plan), phases.run.path)
    start = getattr(progress, "start", None)
    if start is not None:
        start(sum(s.num_docs for s in pending))


def open_executor(
    executor: ExecutorConfig, job: Job, folder: Path, model: ModelRecord, expected: int
) -> Executor:
    """The executor that runs the job's tasks, each on a worker of the job."""
    on_setup = partial(write_provenance, folder, {"model_hash_s": round(model.seconds, 3)})
    if executor.kind == "local":  # the driver's corpus, already open; one model load in this process
        return LocalExecutor(lambda: job.worker(job.config, str(folder), job.corpus, model.seen), on_setup)
    from scanner.executors.ray import RayExecutor  # Ray is imported only when asked for

    # Actors open the corpus themselves from shared storage: the factory pickles configs and paths only.
    return RayExecutor(
        executor,
        partial(job.worker, job.config, str(folder.resolve())),
        on_setup,
        expected_tasks=expected,
        beat_path=partial(beat_path, folder),
        on_given_up=partial(record_given_up, folder),
    )


def beat_path(run_path, task):
    """A task's heartbeat file, which the Ray driver watches (executors/liveness.py)."""
    return progress_path(run_path, heartbeat_name(task))


def write_provenance(folder: Path, driver: dict, meta: dict[str, str]) -> None:
    # Model and tokenizer identities are known only once loaded: beside the run's config; `driver`: what
    # the driver measured (the seconds its hashing of the model's files took).
    atomic_write_json(folder / "provenance.json", {**meta, **{k: str(v) for k, v in driver.items()}})
