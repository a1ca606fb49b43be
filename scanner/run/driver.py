"""The corpus scan driver: validate, plan, hand the pending shards to an executor, merge the stats.

Validation of the corpus and of the run directory happens before any model loads, so a bad input
costs seconds, not a model load; a relaunch of the same command resumes from the completion markers
of every phase (scanner/run/phases.py), under either executor (they give equal tables).
"""

from __future__ import annotations

import logging

from scanner.config import ExecutorConfig, PassageConfig, ScanConfig
from scanner.engine.check import check_model
from scanner.engine.positions import check_span_fits, declared_positions
from scanner.executors.local import run_local
from scanner.run.passages import ensure_passages
from scanner.stages.read import Corpus, open_corpus
from scanner.storage.lock import run_lock
from scanner.storage.rundir import Plan, RunDir, Shard

log = logging.getLogger(__name__)


def prepare_run(config: ScanConfig, out: str, corpus: Corpus | None = None) -> tuple[Corpus, RunDir, Plan]:
    corpus = corpus or validate(config, out)
    run = RunDir(out)
    plan = run.prepare(config.to_dict(), corpus.fingerprint(), corpus.num_rows, config.docs_per_shard)
    return corpus, run, plan


def pending_shards(run: RunDir, plan: Plan) -> list[Shard]:
    """The shards phase 1 has still to screen (for the progress bar)."""
    from scanner.storage.store import Store

    done = Store(run.path, "screen").done()
    return [s for s in plan if s.shard not in done]


def run_scan(config: ScanConfig, out: str, progress=None, executor: ExecutorConfig | None = None,
             corpus: Corpus | None = None, passages: PassageConfig | None = None) -> dict:
    """Scan the corpus into `out`, then build RUN/passages.parquet once every shard is done; returns
    the merged stats with the executor's report under "run" (failed shards, actor restarts).
    `progress(stats)` is called per finished shard; `corpus`: the corpus already opened and validated
    by the caller."""
    executor = executor or ExecutorConfig()
    corpus = corpus or validate(config, out)
    with run_lock(out):
        return _locked_scan(config, corpus, out, progress, executor, passages or PassageConfig())


def validate(config: ScanConfig, out: str) -> Corpus:
    """Every check that needs no run directory, before one is made or locked."""
    RunDir(out)  # the path's own checks (empty, object-store URI)
    corpus = open_corpus(config.corpus)
    check_model(config.model)  # a bad --model leaves no run directory to refuse the corrected command
    check_span_fits(config.spans.span_tokens, config.screen.context_tokens, config.search.tau,
                    declared_positions(config.model.model))
    return corpus


def _locked_scan(config: ScanConfig, corpus: Corpus, out: str, progress, executor: ExecutorConfig,
                 passages: PassageConfig) -> dict:
    corpus, run, plan = prepare_run(config, out, corpus)
    log.info("%d of %d shards still to screen in %s", len(pending_shards(run, plan)), len(plan), out)
    if executor.kind == "local":
        # Passages on the scan's own engine, before it closes: no second model load.
        after = lambda engine: ensure_passages(run, config, corpus, passages, engine=engine)  # noqa: E731
        report = run_local(config, corpus, run, plan, progress, after=after)
    else:
        from scanner.executors.ray import run_ray  # Ray is imported only when asked for

        report = run_ray(config, run, plan, executor, progress)
    # A relaunch of a finished run, or after Ray: built only when missing or stale.
    ensure_passages(run, config, corpus, passages, executor=executor)
    return {**run.merge_stats(), "run": report}
