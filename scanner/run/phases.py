"""The scan in four phases, each resumable from what the previous one committed (nothing goes back up):

1. screen: every shard screened (spans, screen; no search) into screen/part-XXXXX.parquet; candidates
   are rows with status not_searched.
2. decide, then tighten (run/units.py plans the units, run/spend.py spends the budget on them): certify
   units settle by generation the candidates their certificates prove (no budget, no GCG); search units
   decide the others best-first while --search-budget / --max-candidates allow, each search stopping at
   its verdict. Once the budget allows no more search units, the recall audit (--audit-sample: by
   default searches worth a quarter of the search's seconds) searches a seeded random sample, stratified
   along the rank, of what the search left (candidates past the budget, distinct targets) and of what the
   screen dropped (screened_out), in audit units outside the budget; recall.json estimates from their
   committed verdicts what the unsearched still hold (run/audit.py, measures/recall.py). Its draw is
   saved with what it was drawn from and made again when that or the sample changed, its committed finds
   kept. Only when every candidate has its verdict do tighten units shrink the decided prompts, best
   bound first, while budget remains.
3. write (run/write.py): results/part-XXXXX.parquet per shard = the screen rows updated by the units'
   rows, with the candidates never searched left not_searched and the reason; export/report/verify read
   only these.
4. passages: once every shard is written, RUN/passages.parquet when it is missing or stale: on a
   worker (a PassagesTask, whose engine extends the passages by generation), or here when nothing is
   to be extended.

Every phase hands its tasks to the executor's `execute(tasks, admit, finished)` (scanner/executors),
which only decides where they run (in this process or on Ray actors) and never calls back.
"""

from __future__ import annotations

import logging

from scanner import stop
from scanner.config import PassageConfig, ScanConfig
from scanner.executors import Executor
from scanner.measures import budget as bm
from scanner.run import audit
from scanner.run import units as plans
from scanner.run.passages import needs_engine, write_passages
from scanner.run.spend import AutoStop, logged, spend
from scanner.run.tasks import UNIT_KINDS, PassagesTask
from scanner.run.write import write_results
from scanner.storage.passages import is_current
from scanner.storage.rundir import Plan, RunDir
from scanner.storage.store import Store

log = logging.getLogger(__name__)


class Phases:
    """The driver's view of one run directory's phases: its config, shard plan and stores, which
    run/units.py, run/spend.py, run/audit.py and run/write.py read and write."""

    def __init__(
        self,
        config: ScanConfig,
        run: RunDir,
        plan: Plan,
        corpus=None,
        passages: PassageConfig | None = None,
        draw=None,
    ) -> None:
        self.config, self.run, self.plan = config, run, plan
        self.corpus, self.passages = corpus, passages or PassageConfig()  # phase 4
        # `acr-scan plan` only: draw(order) -> (the candidates to search, what the draw records); saved
        # with the search plan, so a relaunch searches the same draw.
        self.draw = draw
        self.budget = bm.parse_budget(config.search_budget)
        self.stores = {name: Store(run.path, name) for name in ("screen", *UNIT_KINDS)}
        self.auto_stop = AutoStop(self)  # --search-budget auto: where the search stops

    def prepare(self) -> int:
        """Damaged parts pending again; units holding failed rows too (failed is retried, like shards).
        Returns how many parts were reopened."""
        reopened = sum(len(store.prepare()) for store in self.stores.values())
        for name, index, _ in self._failing():
            self.stores[name].reopen(index)
            reopened += 1
        return reopened

    def _failing(self) -> list[tuple[str, int, int]]:
        return plans.failing(self, set(audit.current(audit.read_plan(self.run))))

    def failed_rows(self) -> dict[str, int]:
        """{unit kind: failed rows} the run holds now, which a relaunch retries (empty: none)."""
        out: dict[str, int] = {}
        for name, _, failed in self._failing():
            out[name] = out.get(name, 0) + failed
        return out

    def screen_pending(self) -> list:
        done = self.stores["screen"].done()
        return [s for s in self.plan if s.shard not in done]

    def unsearched(self) -> dict:
        """What the recall audit samples (run/audit.py population), one row per distinct target in rank order."""
        return audit.population(self, audit.earlier(self, audit.read_plan(self.run)))


def run_phases(phases: Phases, execute: Executor, progress=None) -> dict:
    """Phases 1-4 through `execute`; returns the executor's report of tasks that failed for good.
    Raises stop.Stopped once a phase's tasks returned after a stop request (scanner/stop.py): no phase
    after it runs, so nothing is written from a search the stop left unfinished."""
    execute = PhaseExecutor(execute)
    failed = _screen_search_write(phases, execute, progress)
    return failed or build_passages(phases, execute)


class PhaseExecutor(Executor):
    """The executor as the phases call it: a call during which a stop was requested raises stop.Stopped
    once it returns, and the tasks that finished are counted (a relaunch with nothing to do rewrites
    nothing)."""

    def __init__(self, inner: Executor) -> None:
        if not isinstance(inner, Executor):
            raise TypeError(
                f"the phases run on an Executor (scanner/executors: __call__(tasks, admit, finished), "
                f"workers, set_up(), close()); {inner!r} is not one"
            )
        self.inner, self.finished = inner, 0

    @property
    def workers(self) -> int:
        # Read when a phase computes its deadline, after set_up: on Ray the actors that started, or the
        # nodes that joined since the scan began, not the count guessed before any actor existed.
        return self.inner.workers

    def __call__(self, tasks: list, admit, finished) -> dict:
        def count(stats: dict) -> None:
            self.finished += 1
            finished(stats)

        failed = self.inner(tasks, admit, count)
        stop.check()
        return failed

    def set_up(self) -> None:
        self.inner.set_up()

    def close(self) -> dict:
        return self.inner.close()


def _screen_search_write(phases: Phases, execute: PhaseExecutor, progress) -> dict:
    """Phases 1-3: screen, certify, search under the budget, audit, tighten, write the results. Each step
    returns None to go on, or what the run returns now: its failed tasks, or {} when work stays pending
    (the budget, a stop) for a relaunch."""
    ran = phases.prepare()
    if (halt := _screen(phases, execute, progress)) is not None:
        return halt
    if (halt := _certify(phases, execute)) is not None:
        return halt
    search = plans.search_units(phases)
    if failed := spend(phases, execute, search):
        return failed
    # Every verdict first; a failed one is retried by a relaunch before the tightening is planned.
    if (halt := _audit(phases, execute)) is not None:
        return halt
    decided = not plans.pending(phases, search) and not plans.failed(phases, "search")
    tighten = plans.tighten_units(phases) if decided else []
    if failed := spend(phases, execute, tighten):
        return failed
    if ran or execute.finished or len(phases.run.done_shards()) < len(phases.plan):
        write_results(phases, search + tighten)  # a relaunch of a finished run writes nothing
    audit.write_recall(
        phases
    )  # ... but recall.json, when missing or saying otherwise than the committed audit
    return {}


def _screen(phases: Phases, execute: Executor, progress) -> dict | None:
    failed = execute(phases.screen_pending(), None, progress or (lambda stats: None))
    return failed if failed or phases.screen_pending() else None


def _certify(phases: Phases, execute: Executor) -> dict | None:
    certify = plans.certify_units(phases)
    failed = execute(plans.pending(phases, certify), None, logged(phases))
    if failed or plans.pending(phases, certify):
        return failed
    # the search plan needs every certificate's verdict: a relaunch checks these again
    return plans.unchecked(phases) or None


def _audit(phases: Phases, execute: Executor) -> dict | None:
    """What the budget left, sampled: the recall the run can state (run/audit.py)."""
    if plans.failed(phases, "search"):
        return None
    drawn = audit.units(phases)
    if plans.pending(phases, drawn):
        log.info(audit.cost_line(audit.read_plan(phases.run), plans.pending(phases, drawn)))
    failed = execute(plans.pending(phases, drawn), None, logged(phases))
    return failed if failed or plans.pending(phases, drawn) else None


def build_passages(phases: Phases, execute: Executor) -> dict:
    """Phase 4: passages.parquet, once every shard is written and only when missing or stale."""
    run, passages = phases.run, phases.passages
    if run.pending(phases.plan) or is_current(run, passages):
        return {}
    if not needs_engine(run, passages):  # nothing to extend: no model, no worker
        write_passages(run, phases.config, phases.corpus, None, passages)
        return {}
    failed = execute([PassagesTask(passages)], None, lambda stats: None)
    if not failed:
        log.info("passages built in one task on the executor's worker")
    return failed
