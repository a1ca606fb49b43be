"""The scan in four phases, each resumable from what the previous one committed (nothing goes back up):

1. screen: every shard screened (spans, screen; no search) into screen/part-XXXXX.parquet; candidates
   are rows with status not_searched.
2. search: candidates whose natural-prefix certificate is shorter than the span are settled by
   generation from the certificate (certify units, no budget, no GCG); then all other candidates,
   ranked corpus-wide by screen evidence (budget.py), are searched best-first in units of
   --unit-size while --search-budget / --max-candidates allow (--tighten: the settled ones after).
3. write: results/part-XXXXX.parquet per shard = the screen rows updated by the units' rows, with the
   candidates never searched left not_searched and the reason; export/report/verify read only these.
4. passages: once every shard is written, RUN/passages.parquet when it is missing or stale: on a
   worker (a PassagesTask, whose engine extends the passages by generation), or here when nothing is
   to be extended.

Every phase hands its tasks to the executor's `execute(tasks, admit, finished)`, which only decides
where they run (in this process or on Ray actors) and never calls back.

Budget accounting is resume-safe: what is spent is what committed units recorded (their stats), so a
relaunch continues where the last committed unit left off. Units start in rank order while budget is
left: with the local executor one at a time, so a steps budget gives the same table on every run and
relaunch. Under Ray up to one unit per actor is in flight when the budget runs out; those finish and
are kept, so a run can overshoot by at most (actors) units, each at most --unit-size candidates' full
GCG schedules (seconds: plus the time they were already running).
"""

from __future__ import annotations

import logging
from collections import defaultdict

import pyarrow as pa
import pyarrow.parquet as pq

from scanner.config import PassageConfig, ScanConfig
from scanner.measures import budget as bm
from scanner.run.passages import needs_engine, write_passages
from scanner.run.shard import shard_stats
from scanner.run.tasks import PassagesTask, Unit
from scanner.schema import RANK_COLUMNS, results_schema
from scanner.storage.atomic import atomic_write_json
from scanner.storage.integrity import read_json_object
from scanner.storage.passages import is_current
from scanner.storage.rundir import PHASE_PLANS, Plan, RunDir
from scanner.storage.store import Store

log = logging.getLogger(__name__)

CERTIFY_PLAN, SEARCH_PLAN = PHASE_PLANS  # saved once, beside run_config.json (storage/rundir.py)


class Phases:
    """The driver's view of one run directory's phases; `execute(tasks, admit, finished)` is the
    executor's (local or Ray) and returns {task name: error} for tasks that failed for good."""

    def __init__(self, config: ScanConfig, run: RunDir, plan: Plan, corpus=None,
                 passages: PassageConfig | None = None) -> None:
        self.config, self.run, self.plan = config, run, plan
        self.corpus, self.passages = corpus, passages or PassageConfig()  # phase 4
        self.budget = bm.parse_budget(config.search_budget)
        self.stores = {name: Store(run.path, name) for name in ("screen", "certify", "search")}

    def prepare(self) -> int:
        """Damaged parts pending again; units holding failed rows too (failed is retried, like shards).
        Returns how many parts were reopened."""
        reopened = sum(len(store.prepare()) for store in self.stores.values())
        for name in ("certify", "search"):
            store = self.stores[name]
            for index in store.done_shards():
                if store.stats(index).get("failed"):
                    store.reopen(index)
                    reopened += 1
        return reopened

    def screen_pending(self) -> list:
        done = self.stores["screen"].done()
        return [s for s in self.plan if s.shard not in done]

    def candidates(self) -> list[dict]:
        """Every candidate of the corpus (screen rows with status not_searched), ranking columns only."""
        screen = self.stores["screen"]
        tables = [pq.read_table(screen.result_path(s.shard), columns=list(RANK_COLUMNS),
                                filters=[("status", "=", "not_searched")]) for s in self.plan]
        return [row for t in tables for row in t.to_pylist()]

    def _units(self, name: str, kind: str, make) -> list[Unit]:
        path = self.run.path / name
        saved = read_json_object(path)
        if saved is None:
            saved = make()
            atomic_write_json(path, saved)
        return [Unit.from_json(kind, i, items) for i, items in enumerate(saved["units"])]

    def certify_units(self) -> list[Unit]:
        def make() -> dict:
            settling = bm.rank([r for r in self.candidates() if bm.settles(r)])
            return {"units": bm.units([[r["shard"], r["span_id"]] for r in settling], self.config.unit_size)}
        return self._units(CERTIFY_PLAN, "certify", make)

    def search_units(self) -> list[Unit]:
        def make() -> dict:
            settled = {r["span_id"] for r in self.stores["certify"].rows() if r["status"] == "memorized"}
            ranked = bm.rank(self.candidates())
            order = [r for r in ranked if r["span_id"] not in settled]
            if self.config.tighten:
                order += [r for r in ranked if r["span_id"] in settled]
            if self.config.max_candidates is not None:
                order = order[:self.config.max_candidates]
            return {"units": bm.units([[r["shard"], r["span_id"]] for r in order], self.config.unit_size)}
        return self._units(SEARCH_PLAN, "search", make)

    def unchecked(self) -> dict[str, str]:
        """Certify units holding failed rows: {unit name: why}."""
        store = self.stores["certify"]
        return {f"certify-{i:05d}": "a certificate check failed (see logs/); relaunch to check it again"
                for i in store.done_shards() if store.stats(i).get("failed")}

    def spent(self) -> float:
        store = self.stores["search"]
        return bm.spent([store.stats(i) for i in store.done_shards()], self.budget)

    def pending(self, units: list[Unit]) -> list[Unit]:
        done = self.stores[units[0].kind].done() if units else set()
        return [u for u in units if u.index not in done]


def run_phases(phases: Phases, execute, progress=None) -> dict:
    """Phases 1-4 through `execute`; returns the executor's report of tasks that failed for good."""
    failed = _screen_search_write(phases, execute, progress)
    return failed or build_passages(phases, execute)


def build_passages(phases: Phases, execute) -> dict:
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


def _screen_search_write(phases: Phases, execute, progress) -> dict:
    """Phases 1-3: screen, certify and search, write the results."""
    ran = phases.prepare()
    execute = _counting(execute, counter := [0])
    failed = execute(phases.screen_pending(), None, progress or (lambda stats: None))
    if failed or phases.screen_pending():
        return failed
    certify = phases.certify_units()
    failed = execute(phases.pending(certify), None, _logged(phases, lambda: None))
    if failed or phases.pending(certify):
        return failed
    unchecked = phases.unchecked()
    if unchecked:  # the search plan needs every certificate's verdict: a relaunch checks these again
        return unchecked
    search = phases.search_units()
    spent = {"value": phases.spent()}

    def finished(stats: dict) -> None:
        spent["value"] += bm.spent([stats], phases.budget)

    failed = execute(phases.pending(search), lambda: bm.may_start(spent["value"], phases.budget),
                     _logged(phases, lambda: spent["value"], finished))
    if failed:
        return failed
    if ran or counter[0] or len(phases.run.done_shards()) < len(phases.plan):
        write_results(phases, search)  # a relaunch of a finished run writes nothing
    return {}


def _counting(execute, counter: list[int]):
    """`execute` that counts the tasks that finished (a relaunch with nothing to do rewrites nothing)."""
    def counted(tasks: list, admit, finished) -> dict:
        def count(stats: dict) -> None:
            counter[0] += 1
            finished(stats)
        return execute(tasks, admit, count)
    return counted


def _logged(phases: Phases, spent, then=None):
    def log_unit(stats: dict) -> None:
        if then:
            then(stats)
        used = spent()
        line = "" if used is None else f"; search spent {used:g} of {phases.budget or 'no budget'}"
        log.info("%s: %d candidates, %d memorized%s", stats.get("unit"), stats.get("candidates", 0),
                 stats.get("memorized", 0), line)
    return log_unit


def _reasons(phases: Phases, search: list[Unit]) -> dict[str, str]:
    """Why each candidate that no unit settled or searched stays not_searched."""
    done = phases.stores["search"].done()
    out = {}
    for unit in search:
        if unit.index not in done:
            out.update({span: f"search budget spent (--search-budget {phases.config.search_budget})"
                        for _, span in unit.items})
    return out


def _better(old: dict, new: dict) -> dict:
    """A tightening search replaces a certificate's verdict only with a memorized prompt no longer."""
    if old.get("acr_kind") != "certificate_bound":
        return new
    if new["status"] == "memorized" and new["prompt_tokens"] <= old["prompt_tokens"]:
        return new
    return old


def write_results(phases: Phases, search: list[Unit]) -> None:
    """Phase 3: results/part-XXXXX.parquet per shard, screen rows updated by the units' rows."""
    by_shard = defaultdict(list)
    for name in ("certify", "search"):
        for row in phases.stores[name].rows():
            by_shard[row["shard"]].append(row)
    reasons = _reasons(phases, search)
    cut = "candidate budget spent (--max-candidates)"
    screen = phases.stores["screen"]
    for shard in phases.plan:
        table = screen.read(shard.shard)
        rows = {r["span_id"]: r for r in table.to_pylist()}
        for row in by_shard[shard.shard]:
            rows[row["span_id"]] = _better(rows[row["span_id"]], row)
        for row in rows.values():
            if row["status"] == "not_searched":
                row["reason"] = reasons.get(row["span_id"], cut)
        final = list(rows.values())
        stats = screen.stats(shard.shard)
        seconds = stats.get("seconds", 0.0) + sum(r["search_s"] for r in final)
        out = pa.Table.from_pylist(final, schema=results_schema()).replace_schema_metadata(table.schema.metadata)
        phases.run.write_shard(shard.shard, out, shard_stats(final, stats.get("documents", 0), seconds))
