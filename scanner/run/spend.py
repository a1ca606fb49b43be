"""The search budget (--search-budget), shared by the search and tighten units: what is spent, which
units start, where --search-budget auto stops the search, what the budget cut.

Budget accounting is resume-safe: what is spent is what committed search and tighten units recorded
(their stats), so a relaunch continues where the last committed unit left off. Units start in rank
order while budget is left: with the local executor one at a time, so a steps budget gives the same
table on every run and relaunch; a steps budget is checked between units, so it may be overshot by
the units in flight (one per actor). A seconds budget is also a deadline (a wall-clock instant: the
seconds left divided among the workers) that every unit carries to wherever it runs: past it no unit
starts, no search of a running unit starts, and the searches running are cut between two GCG requests,
so the overshoot is about one step per worker (bench/budget/budget_overshoot.py). A unit cut so commits the
verdicts it reached and records its cut searches (stats "cut"); it stays pending, and a relaunch with a
larger --search-budget (a relaunch may change the budget) searches only those.

Every function takes the driver's `Phases` (run/phases.py)."""

from __future__ import annotations

import logging
import time
from dataclasses import replace

import pyarrow.parquet as pq

from scanner.executors import Executor
from scanner.measures import budget as bm
from scanner.run import units as plans
from scanner.run.tasks import Unit
from scanner.storage.atomic import atomic_write_json
from scanner.storage.rundir import STOP_FILE

log = logging.getLogger(__name__)

SEARCHED = ("search", "tighten")  # the stores whose units spend the budget


def spent(phases) -> float:
    """What the committed search and tighten units spent, in the budget's unit."""
    stats = [
        store.stats(i) for name in SEARCHED for store in [phases.stores[name]] for i in store.done_parts()
    ]
    return bm.spent(stats, phases.budget)


def cut(phases) -> dict[str, dict]:
    """{span_id: what its search spent} of every search the budget cut in a done unit."""
    return {
        span: used
        for name in SEARCHED
        for store in [phases.stores[name]]
        for i in store.done_parts()
        for span, used in store.stats(i).get("cut", {}).items()
    }


class AutoStop:
    """Where --search-budget auto stops the search, from the committed search units' verdicts
    (measures/budget.py auto_stop). Done units do not change, so their verdicts are read once."""

    def __init__(self, phases) -> None:
        self.phases = phases
        self.judged: dict[int, list[bool]] = {}  # search unit -> its verdicts
        self.ranked: list | None = None  # the search plan's units, once saved

    def __call__(self) -> bm.Stop | None:
        """None without auto or while the yield holds."""
        rule = bm.parse_auto(self.phases.config.search_budget)
        if rule is None:
            return None
        if self.ranked is None:  # the saved plan does not change: read once, not at every unit's start
            self.ranked = plans.read_plan(self.phases, plans.SEARCH_PLAN).get("units", [])
        done = self.phases.stores["search"].done()
        return bm.auto_stop(
            [self._verdicts(i, unit) if i in done else None for i, unit in enumerate(self.ranked)], rule
        )

    def _verdicts(self, index: int, unit: list) -> list[bool] | None:
        """A done search unit's verdicts in rank order (True: memorized); None for a unit a relaunch
        runs again (cut by the budget, or holding failed rows)."""
        if index in self.judged:
            return self.judged[index]
        store = self.phases.stores["search"]
        stats = store.stats(index)
        if stats.get("cut") or stats.get("failed"):
            return None
        table = pq.read_table(store.result_path(index), columns=["span_id", "status"])
        status = dict(
            zip(table.column("span_id").to_pylist(), table.column("status").to_pylist(), strict=True)
        )
        verdicts = [
            status[span] == "memorized"
            for _, span, *_ in unit
            if status.get(span) in ("memorized", "not_memorized")
        ]
        self.judged[index] = verdicts
        return verdicts

    def record(self) -> None:
        """STOP_FILE: where --search-budget auto stopped and why (status reads it); removed when the
        search goes on (no auto budget now, or the yield holds)."""
        phases = self.phases
        path, stop = phases.run.path / STOP_FILE, self()
        if stop is None:
            path.unlink(missing_ok=True)
            return
        done = phases.stores["search"].done()
        left = [u for i, u in enumerate(self.ranked) if i >= stop.unit and i not in done]
        atomic_write_json(
            path,
            {
                "budget": phases.config.search_budget,
                **stop.to_json(),
                "unit_name": f"search-{stop.unit:05d}",
                "why": stop.why(),
                "units_left": len(left),
                "candidates_left": sum(map(len, left)),
            },
        )


def spend(phases, execute: Executor, units: list[Unit]) -> dict:
    """The pending units, started in rank order while the budget (shared by search and tighten) lasts.
    A seconds budget is also a deadline every unit carries (a wall-clock instant, plain data that reaches
    Ray actors): the searches still running then are cut within a step, and their unit records them.
    --search-budget auto also stops the search units where the yield along the rank falls (checked
    between units, like a steps budget), and the run records where (AutoStop.record)."""
    searching = bool(units) and units[0].kind == "search"
    failed = _start(phases, execute, units, phases.auto_stop if searching else lambda: None)
    if searching and not failed:
        phases.auto_stop.record()
    return failed


def _start(phases, execute: Executor, units: list[Unit], stop) -> dict:
    used = {"value": spent(phases)}
    pending = plans.pending(phases, units)
    if not pending or not bm.may_start(used["value"], phases.budget) or stop() is not None:
        return {}  # nothing to start: no model loads for it
    if phases.budget is not None and phases.budget.kind == "seconds":
        execute.set_up()  # the model loads before the budget's clock starts (a relaunch loads it here)
    deadline = bm.deadline(used["value"], phases.budget, execute.workers, time.time())
    pending = [replace(u, deadline=deadline) for u in pending]

    def finished(stats: dict) -> None:
        used["value"] += bm.spent([stats], phases.budget)

    def admit() -> bool:
        return (
            bm.may_start(used["value"], phases.budget)
            and (deadline is None or time.time() < deadline)
            and stop() is None
        )

    return execute(pending, admit, logged(phases, lambda: used["value"], finished))


def logged(phases, used=lambda: None, then=None):
    """A `finished(stats)` that logs each unit, with what the search spent so far where `used()` says."""

    def log_unit(stats: dict) -> None:
        if then:
            then(stats)
        so_far = used()
        line = "" if so_far is None else f"; search spent {so_far:g} of {phases.budget or 'no budget'}"
        log.info(
            "%s: %d candidates, %d memorized%s",
            stats.get("unit"),
            stats.get("candidates", 0),
            stats.get("memorized", 0),
            line,
        )

    return log_unit
