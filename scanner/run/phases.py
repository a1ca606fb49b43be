"""The scan in four phases, each resumable from what the previous one committed (nothing goes back up):

1. screen: every shard screened (spans, screen; no search) into screen/part-XXXXX.parquet; candidates
   are rows with status not_searched.
2. decide, then tighten: candidates whose natural-prefix certificate is shorter than the span are settled
   by generation from the certificate (certify units, no budget, no GCG); then all other candidates,
   ranked corpus-wide by screen evidence (budget.py), are decided best-first in search units of
   --unit-size while --search-budget / --max-candidates allow: each search stops at its verdict (the
   first verified prompt, or "not memorized"). Once the budget allows no more search units, the recall
   audit (--audit-sample: by default searches worth a quarter of the search's seconds) searches a seeded
   random sample, stratified along the rank, of what the search left (candidates past the budget,
   distinct targets) and of what the screen dropped (screened_out), in audit units outside the budget;
   recall.json estimates from their committed verdicts what the unsearched still hold (run/audit.py,
   measures/recall.py). Its draw is saved with what it was drawn from and made again when that or the
   sample changed, its committed finds kept. Only when every candidate has its verdict do tighten
   units shrink the decided prompts, best bound first, while budget remains (--tighten: the certified
   spans too). A span's search depends only on its target tokens: identical targets (a header every
   book carries, a quotation, a second edition) are certified or searched once, by their best-ranked
   copy, and the other copies take its verdict (searched_as); copies count once against the budget.
3. write: results/part-XXXXX.parquet per shard = the screen rows updated by the units' rows, with the
   candidates never searched left not_searched and the reason; export/report/verify read only these.
4. passages: once every shard is written, RUN/passages.parquet when it is missing or stale: on a
   worker (a PassagesTask, whose engine extends the passages by generation), or here when nothing is
   to be extended.

Every phase hands its tasks to the executor's `execute(tasks, admit, finished)`, which only decides
where they run (in this process or on Ray actors) and never calls back.

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
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import replace

import pyarrow as pa
import pyarrow.parquet as pq

from scanner import stop
from scanner.config import PassageConfig, ScanConfig
from scanner.measures import budget as bm
from scanner.results.rows import copied_row
from scanner.run import audit, dropped, occurrences
from scanner.run.passages import needs_engine, write_passages
from scanner.run.shard import shard_stats
from scanner.run.tasks import UNIT_KINDS, PassagesTask, Unit
from scanner.schema import RANK_COLUMNS, results_schema
from scanner.storage.atomic import atomic_write_json
from scanner.storage.passages import is_current
from scanner.storage.records import AUDIT_DRAW, UNITS_PLAN, read_record
from scanner.storage.rundir import AUDIT_PLAN, PHASE_PLANS, STOP_FILE, Plan, RunDir
from scanner.storage.store import Store

log = logging.getLogger(__name__)

CERTIFY_PLAN, SEARCH_PLAN, TIGHTEN_PLAN = PHASE_PLANS  # saved once, beside run_config.json (storage/rundir.py)
SEARCHED = ("search", "tighten")  # the stores whose units spend the budget
POSITION = ("doc_row", "token_start", "token_end")  # where a span stands: its passage's neighbours


class Phases:
    """The driver's view of one run directory's phases; `execute(tasks, admit, finished)` is the
    executor's (local or Ray) and returns {task name: error} for tasks that failed for good."""

    def __init__(self, config: ScanConfig, run: RunDir, plan: Plan, corpus=None,
                 passages: PassageConfig | None = None, draw=None) -> None:
        self.config, self.run, self.plan = config, run, plan
        self.corpus, self.passages = corpus, passages or PassageConfig()  # phase 4
        # `acr-scan plan` only: draw(order) -> (the candidates to search, what the draw records); saved
        # with the search plan, so a relaunch searches the same draw.
        self.draw = draw
        self.budget = bm.parse_budget(config.search_budget)
        self.stores = {name: Store(run.path, name) for name in ("screen", *UNIT_KINDS)}
        self._judged: dict[int, list[bool]] = {}  # search unit -> its verdicts (--search-budget auto)
        self._ranked: list | None = None  # the search plan's units, once saved

    def prepare(self) -> int:
        """Damaged parts pending again; units holding failed rows too (failed is retried, like shards).
        Returns how many parts were reopened."""
        reopened = sum(len(store.prepare()) for store in self.stores.values())
        for name, index, _ in self._failing():
            self.stores[name].reopen(index)
            reopened += 1
        return reopened

    def _failing(self) -> list[tuple[str, int, int]]:
        """(kind, index, failed rows) of every done unit holding failed rows that a relaunch runs again
        (an earlier audit draw's kept parts are not run again)."""
        drawn = set(audit.current(audit.read_plan(self.run)))
        out = []
        for name in UNIT_KINDS:
            store = self.stores[name]
            for index in store.done_shards():
                failed = store.stats(index).get("failed")
                if failed and (name != "audit" or index in drawn):
                    out.append((name, index, failed))
        return out

    def failed_rows(self) -> dict[str, int]:
        """{unit kind: failed rows} the run holds now, which a relaunch retries (empty: none)."""
        out: dict[str, int] = {}
        for name, _, failed in self._failing():
            out[name] = out.get(name, 0) + failed
        return out

    def screen_pending(self) -> list:
        done = self.stores["screen"].done()
        return [s for s in self.plan if s.shard not in done]

    def candidates(self, status: str = "not_searched") -> list[dict]:
        """Every candidate of the corpus (screen rows with status not_searched; the recall audit also asks
        for the screened_out ones): the ranking columns and what tells copies apart (target ids, certificate)."""
        screen = self.stores["screen"]
        columns = [*RANK_COLUMNS, *POSITION, "target_ids", "certificate_prompt"]
        return [row for s in self.plan for row in _keyed(pq.read_table(screen.result_path(s.shard), columns=columns,
                                                                       filters=[("status", "=", status)])).to_pylist()]

    def _units(self, name: str, kind: str, make) -> list[Unit]:
        saved = self._plan(name, make)
        return [Unit.from_json(kind, i, items) for i, items in enumerate(saved["units"])]

    def _plan(self, name: str, make=None) -> dict:
        path = self.run.path / name
        saved = read_record(path, AUDIT_DRAW if name == AUDIT_PLAN else UNITS_PLAN)  # a bad one: made again
        if saved is None and make is not None:
            saved = make()
            atomic_write_json(path, saved)
        return saved or {}

    def certify_units(self) -> list[Unit]:
        def make() -> dict:
            settling = bm.rank([r for r in self.candidates() if bm.settles(r)])
            # the same target after the same certificate: one generation decides every copy
            checked, copies = bm.distinct(settling, lambda r: (bm.target_key(r), r["certificate_prompt"]))
            return {"units": bm.units([[r["shard"], r["span_id"]] for r in checked], self.config.unit_size),
                    "copies": copies}
        return self._units(CERTIFY_PLAN, "certify", make)

    def settled(self) -> set[str]:
        """Spans their certificates settled, the copies of a settled one included."""
        certified = {r["span_id"] for r in self.stores["certify"].rows() if r["status"] == "memorized"}
        copies = self._plan(CERTIFY_PLAN).get("copies", {})
        return certified | {span for rep in certified for _, span in copies.get(rep, [])}

    def search_units(self) -> list[Unit]:
        def make() -> dict:
            settled = self.settled()
            ranked = bm.rank(self.candidates())
            known = {}  # a target one copy's certificate settled: the others take its verdict
            for row in ranked:
                if row["span_id"] in settled:
                    known.setdefault(bm.target_key(row), row["span_id"])
            # the settled spans (certified, and their copies) mark their passages as found
            found = [(r["doc_row"], r["token_start"], r["token_end"]) for r in ranked if r["span_id"] in settled]
            open_, waits = bm.fresh_first([r for r in ranked if r["span_id"] not in settled], found)
            order, copies = bm.distinct(open_, bm.target_key, known)
            if self.config.max_candidates is not None:
                order = order[:self.config.max_candidates]
            drawn = {}
            if self.draw is not None:
                order, drawn = self.draw(order)
                chosen = {r["span_id"] for r in order}
                copies = {rep: items for rep, items in copies.items() if rep in chosen}
            return {"units": bm.units([[r["shard"], r["span_id"]] for r in order], self.config.unit_size),
                    "copies": copies, "waits": sorted(waits & {r["span_id"] for r in order}),
                    **({"drawn": drawn} if drawn else {})}
        return self._units(SEARCH_PLAN, "search", make)

    def tighten_units(self) -> list[Unit]:
        """Once every search unit is done: the decided prompts (--tighten: and the certified spans'),
        best bound first, each decided one with the prompt its shrinking starts from."""
        def make() -> dict:
            rows = [r for r in self.stores["search"].rows() if r["acr_kind"] == "decision_bound"]
            if self.config.tighten:  # a certificate bounds the search from its length (known_length)
                rows += [r for r in self.stores["certify"].rows() if r["status"] == "memorized"]
            order = sorted(rows, key=lambda r: (-(r["acr"] or 0.0), bm.evidence_key(r)))
            items = [[r["shard"], r["span_id"], *([r["prompt"]] if r["acr_kind"] == "decision_bound" else [])]
                     for r in order]
            return {"units": bm.units(items, self.config.unit_size)}
        return self._units(TIGHTEN_PLAN, "tighten", make)

    def unsearched(self) -> dict[str, list[dict]]:
        """What the recall audit samples (run/audit.py population), one row per distinct target in rank order."""
        return audit.population(self, audit.earlier(self, audit.read_plan(self.run)))

    def audit_units(self) -> list[Unit]:
        """The recall audit's units (run/audit.py units): a seeded stratified draw of `unsearched()`,
        saved with what it was drawn from and made again when that or --audit-sample changed."""
        if self.draw is not None:  # `acr-scan plan` projects the audit (run/plan.py), runs none
            return []
        return audit.units(self)

    def audit_strata(self) -> dict[str, str]:
        """{span_id of the audit's current draw with a committed verdict: its stratum}."""
        return audit.committed(self)

    def write_recall(self) -> dict | None:
        """recall.json from the audit's committed verdicts (run/audit.py write_recall); None without them."""
        return audit.write_recall(self)

    def copies(self) -> dict[str, list]:
        """{span_id searched or certified: [[shard, span_id], ...] of its copies} of both plans."""
        out = {}
        for name in (CERTIFY_PLAN, SEARCH_PLAN):
            for rep, items in self._plan(name).get("copies", {}).items():
                out.setdefault(rep, []).extend(items)
        return out

    def failed(self, kind: str) -> bool:
        """Whether a done unit of `kind` holds failed rows (a relaunch runs it again)."""
        store = self.stores[kind]
        return any(store.stats(i).get("failed") for i in store.done_shards())

    def unchecked(self) -> dict[str, str]:
        """Certify units holding failed rows: {unit name: why}."""
        store = self.stores["certify"]
        return {f"certify-{i:05d}": "a certificate check failed (see logs/); relaunch to check it again"
                for i in store.done_shards() if store.stats(i).get("failed")}

    def spent(self) -> float:
        stats = [store.stats(i) for name in SEARCHED for store in [self.stores[name]] for i in store.done_shards()]
        return bm.spent(stats, self.budget)

    def pending(self, units: list[Unit]) -> list[Unit]:
        """Units not done, and units the search budget cut (their cut searches go on from where they are)."""
        if not units:
            return []
        store = self.stores[units[0].kind]
        done = store.done()
        return [u for u in units if u.index not in done or store.stats(u.index).get("cut")]

    def auto_stop(self) -> bm.Stop | None:
        """Where --search-budget auto stops the search, from the committed search units' verdicts
        (measures/budget.py auto_stop); None without auto or while the yield holds."""
        rule = bm.parse_auto(self.config.search_budget)
        if rule is None:
            return None
        if self._ranked is None:  # the saved plan does not change: read once, not at every unit's start
            self._ranked = self._plan(SEARCH_PLAN).get("units", [])
        done = self.stores["search"].done()
        return bm.auto_stop([self._verdicts(i, unit) if i in done else None for i, unit in enumerate(self._ranked)], rule)

    def _verdicts(self, index: int, unit: list) -> list[bool] | None:
        """A done search unit's verdicts in rank order (True: memorized); None for a unit a relaunch
        runs again (cut by the budget, or holding failed rows). Done units do not change: kept."""
        if index in self._judged:
            return self._judged[index]
        store = self.stores["search"]
        stats = store.stats(index)
        if stats.get("cut") or stats.get("failed"):
            return None
        table = pq.read_table(store.result_path(index), columns=["span_id", "status"])
        status = dict(zip(table.column("span_id").to_pylist(), table.column("status").to_pylist(), strict=True))
        verdicts = [status[span] == "memorized" for _, span, *_ in unit
                    if status.get(span) in ("memorized", "not_memorized")]
        self._judged[index] = verdicts
        return verdicts

    def record_stop(self) -> None:
        """STOP_FILE: where --search-budget auto stopped and why (status reads it); removed when the
        search goes on (no auto budget now, or the yield holds)."""
        path, stop = self.run.path / STOP_FILE, self.auto_stop()
        if stop is None:
            path.unlink(missing_ok=True)
            return
        done = self.stores["search"].done()
        left = [u for i, u in enumerate(self._ranked) if i >= stop.unit and i not in done]
        atomic_write_json(path, {"budget": self.config.search_budget, **stop.to_json(),
                                 "unit_name": f"search-{stop.unit:05d}", "why": stop.why(),
                                 "units_left": len(left), "candidates_left": sum(map(len, left))})

    def cut(self) -> dict[str, dict]:
        """{span_id: what its search spent} of every search the budget cut in a done unit."""
        return {span: spent for name in SEARCHED for store in [self.stores[name]]
                for i in store.done_shards() for span, spent in store.stats(i).get("cut", {}).items()}


def run_phases(phases: Phases, execute, progress=None) -> dict:
    """Phases 1-4 through `execute`; returns the executor's report of tasks that failed for good.
    Raises stop.Stopped once a phase's tasks returned after a stop request (scanner/stop.py): no phase
    after it runs, so nothing is written from a search the stop left unfinished."""
    execute = _stoppable(execute)
    failed = _screen_search_write(phases, execute, progress)
    return failed or build_passages(phases, execute)


def _stoppable(execute):
    """`execute` that raises stop.Stopped after a call during which a stop was requested."""
    def call(tasks: list, admit, finished) -> dict:
        failed = execute(tasks, admit, finished)
        stop.check()
        return failed
    call.workers = getattr(execute, "workers", 1)
    call.set_up = getattr(execute, "set_up", lambda: None)
    return call


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
    failed = _spend(phases, execute, search)
    if failed:
        return failed
    # Every verdict first; a failed one is retried by a relaunch before the tightening is planned.
    if not phases.failed("search"):  # what the budget left, sampled: the recall the run can state
        drawn = phases.audit_units()
        if phases.pending(drawn):
            log.info(audit.cost_line(audit.read_plan(phases.run), phases.pending(drawn)))
        failed = execute(phases.pending(drawn), None, _logged(phases, lambda: None))
        if failed or phases.pending(drawn):
            return failed
    tighten = [] if phases.pending(search) or phases.failed("search") else phases.tighten_units()
    failed = _spend(phases, execute, tighten)
    if failed:
        return failed
    if ran or counter[0] or len(phases.run.done_shards()) < len(phases.plan):
        write_results(phases, search + tighten)  # a relaunch of a finished run writes nothing
    phases.write_recall()  # ... but recall.json, when missing or saying otherwise than the committed audit
    return {}


def _spend(phases: Phases, execute, units: list[Unit]) -> dict:
    """The pending units, started in rank order while the budget (shared by search and tighten) lasts.
    A seconds budget is also a deadline every unit carries (a wall-clock instant, plain data that reaches
    Ray actors): the searches still running then are cut within a step, and their unit records them.
    --search-budget auto also stops the search units where the yield along the rank falls (checked
    between units, like a steps budget), and the run records where (record_stop)."""
    searching = bool(units) and units[0].kind == "search"
    failed = _start(phases, execute, units, phases.auto_stop if searching else lambda: None)
    if searching and not failed:
        phases.record_stop()
    return failed


def _start(phases: Phases, execute, units: list[Unit], stop) -> dict:
    spent = {"value": phases.spent()}
    pending = phases.pending(units)
    if not pending or not bm.may_start(spent["value"], phases.budget) or stop() is not None:
        return {}  # nothing to start: no model loads for it
    if phases.budget is not None and phases.budget.kind == "seconds":
        execute.set_up()  # the model loads before the budget's clock starts (a relaunch loads it here)
    deadline = bm.deadline(spent["value"], phases.budget, getattr(execute, "workers", 1), time.time())
    pending = [replace(u, deadline=deadline) for u in pending]

    def finished(stats: dict) -> None:
        spent["value"] += bm.spent([stats], phases.budget)

    def admit() -> bool:
        return (bm.may_start(spent["value"], phases.budget) and (deadline is None or time.time() < deadline)
                and stop() is None)

    return execute(pending, admit, _logged(phases, lambda: spent["value"], finished))


def _keyed(table: pa.Table) -> pa.Table:
    """target_ids replaced by their key (measures/budget.py target_key): a row's ids as Python ints took
    most of a candidate's memory, and the plans compare targets only."""
    key = dropped.keys(table.column("target_ids").cast(pa.list_(pa.int64())))
    return table.drop_columns(["target_ids"]).append_column("target_key", key)


def _counting(execute, counter: list[int]):
    """`execute` that counts the tasks that finished (a relaunch with nothing to do rewrites nothing)."""
    def counted(tasks: list, admit, finished) -> dict:
        def count(stats: dict) -> None:
            counter[0] += 1
            finished(stats)
        return execute(tasks, admit, count)
    counted.workers = getattr(execute, "workers", 1)  # tasks in flight at once: the budget's deadline
    counted.set_up = getattr(execute, "set_up", lambda: None)  # the workers set up (the model loaded)
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


def _reasons(phases: Phases, units: list[Unit], copies: dict) -> dict[str, str]:
    """Why each candidate that no search unit decided stays not_searched (its copies: the same)."""
    done = {kind: phases.stores[kind].done() for kind in SEARCHED}
    budget = f"--search-budget {phases.config.search_budget}"
    waits = set(phases._plan(SEARCH_PLAN).get("waits", []))
    out = {span: _cut_reason(budget, spent) + (WAITED if span in waits and not spent.get("steps") else "")
           for span, spent in phases.cut().items()}
    stop = phases.auto_stop()
    for unit in units:
        if unit.kind == "search" and unit.index not in done["search"]:
            why = f"not reached: the search budget ({budget}) was spent before its turn"
            if stop is not None and unit.index >= stop.unit:
                why = (f"search stopped before search-{stop.unit:05d} by {budget}: {stop.why()}; a relaunch "
                       "with a fixed --search-budget searches it")
            out.update({span: why + (WAITED if span in waits else "") for _, span in unit.spans})
    for rep, items in copies.items():
        if rep in out:
            out.update({span: out[rep] for _, span in items})
    return out


WAITED = "; it waited behind the candidates of passages not yet found, its own passage being found already"


def _cut_reason(budget: str, spent: dict) -> str:
    """Why a search the budget cut stays undecided; one cut before its first GCG step was never reached."""
    if not spent.get("steps"):
        return (f"not reached: the search budget ({budget}) ran out before its search started; "
                "a relaunch with a larger budget searches it")
    return (f"search budget spent during its search ({budget}, after {spent['steps']} GCG steps, "
            f"{spent['search_s']:.1f} s); a relaunch with a larger budget goes on from where it stood")


COST = ("steps", "forwards", "search_s")  # what a span's searches spent, summed over decide and tighten


def _better(old: dict, new: dict) -> dict:
    """A later unit's row for a span over an earlier one's. A verdict that only bounds the ACR (a
    certificate's, or a search's stopped at its verdict) gives way to a tightened prompt no longer than
    its own; else it stays, and a decision bound becomes the schedule's minimum, which that tightening
    found nothing below. Both units' costs count and both units' attempts are kept, in the order they ran
    (each names its stage), whichever prompt stands."""
    kind = old.get("acr_kind")
    if kind not in ("certificate_bound", "decision_bound"):
        return new
    if new["status"] == "failed":  # retried on resume; the verdict stands meanwhile
        return old
    cost = {k: (old.get(k) or 0) + (new.get(k) or 0) for k in COST}
    cost["attempts"] = [*(old.get("attempts") or []), *(new.get("attempts") or [])]
    shorter = new["prompt_tokens"] is not None and new["prompt_tokens"] <= (old["prompt_tokens"] or 0)
    if shorter:
        return {**new, **cost}
    return {**old, **cost, "acr_kind": "searched_min" if kind == "decision_bound" else kind}


def _updates(phases: Phases) -> dict[int, list[dict]]:
    """Every unit's row by shard, in the order units run (certify, search, tighten)."""
    by_shard = defaultdict(list)
    for name in UNIT_KINDS:
        for row in phases.stores[name].rows():
            by_shard[row["shard"]].append(row)
    return by_shard


def _final(rows: dict, updates: list[dict]) -> dict:
    for row in updates:
        rows[row["span_id"]] = _better(rows[row["span_id"]], row)
    return rows


def _verdicts(phases: Phases, copies, updates: dict) -> dict[str, tuple[dict, dict]]:
    """{span of `copies` (span_ids) a unit decided: (its screen row, its final row)}, for the copies to
    take from; a span no unit decided (cut by the budget) has none, and its copies stay candidates."""
    out = {}
    for shard, rows in updates.items():
        mine = [row for row in rows if row["span_id"] in copies]
        if not mine:
            continue
        screened = {r["span_id"]: r for r in phases.stores["screen"].read(shard, {r["span_id"] for r in mine}).to_pylist()}
        final = _final({k: dict(v) for k, v in screened.items()}, mine)
        out.update({span: (screened[span], final[span]) for span in screened})
    return out


def _elsewhere(phases: Phases, verdicts: dict) -> dict[int, list]:
    """{shard: [occurrences.Found]}: the other places of the corpus where a memorized span's tokens stand."""
    memorized = [final for _, final in verdicts.values() if final["status"] == "memorized" and not final.get("searched_as")]
    if phases.corpus is None or not memorized:
        return {}
    from scanner.engine.loading import load_tokenizer  # the tokenizer only, no weights

    tokenizer = load_tokenizer(phases.config.model)[0]
    meta = pq.read_schema(phases.stores["screen"].result_path(phases.plan.shards[0].shard)).metadata or {}
    tokenizer_id = meta.get(b"tokenizer_hash", b"").decode()[:16]
    found = {s.shard: occurrences.find(phases.corpus.documents(s.doc_start, s.doc_end), s.shard, memorized,
                                       tokenizer, tokenizer_id) for s in phases.plan}
    log.info("%d more places of %d memorized spans found by their text", sum(map(len, found.values())), len(memorized))
    return found


def _holders(phases: Phases, verdicts: dict, copies: dict, found: dict) -> dict[str, int]:
    """{memorized span searched or certified: how many documents hold its tokens}: its own, its copies'
    of the plans and those of the places found by its text (results' copies_in_corpus)."""
    memorized = {span for span, (_, final) in verdicts.items() if final["status"] == "memorized"}
    docs = {span: {verdicts[span][1]["doc_row"]} for span in memorized}
    wanted = defaultdict(set)
    for rep in memorized:
        for shard, span in copies.get(rep, []):
            wanted[shard].add(span)
    rep_of = {span: rep for rep in memorized for _, span in copies.get(rep, [])}
    for shard, spans in wanted.items():
        for row in phases.stores["screen"].read(shard, spans).select(["span_id", "doc_row"]).to_pylist():
            docs[rep_of[row["span_id"]]].add(row["doc_row"])
    for places in found.values():
        for place in places:
            docs.setdefault(place.rep, set()).add(place.span.doc_row)
    return {rep: len(held) for rep, held in docs.items()}


def write_results(phases: Phases, units: list[Unit]) -> None:
    """Phase 3: results/part-XXXXX.parquet per shard, screen rows updated by the units' rows, the copies
    by the span searched for them, and every other place of a memorized span's tokens by that span."""
    updates, copies = _updates(phases), phases.copies()
    verdicts = _verdicts(phases, set(copies) | {r["span_id"] for rows in updates.values() for r in rows}, updates)
    copy_of = {span: rep for rep, items in copies.items() for _, span in items}
    found = _elsewhere(phases, verdicts)
    holders = _holders(phases, verdicts, copies, found)
    reasons = _reasons(phases, units, copies)
    drawn = phases._plan(SEARCH_PLAN).get("drawn")
    cut = "not drawn into the plan's sample of the search" if drawn else "candidate budget spent (--max-candidates)"
    screen, audited = phases.stores["screen"], phases.audit_strata()
    for shard in phases.plan:
        table = screen.read(shard.shard)
        rows = _final({r["span_id"]: r for r in table.to_pylist()}, updates[shard.shard])
        for span, row in rows.items():
            searched = verdicts.get(copy_of.get(span))
            if searched and searched[1]["status"] != "not_searched":
                rows[span] = copied_row(row, *searched)
        occurrences.apply(rows, found.get(shard.shard, []), verdicts, phases.config.search.tau)
        for row in rows.values():
            if row["status"] == "not_searched":
                row["reason"] = reasons.get(row["span_id"], cut)
            if row["status"] == "memorized":
                row["copies_in_corpus"] = holders.get(row["searched_as"] or row["span_id"], 1)
            if row["span_id"] in audited and row["status"] != "not_searched":
                row["audit_stratum"] = audited[row["span_id"]]
        final = list(rows.values())  # the places found by text after the shard's own rows
        stats = screen.stats(shard.shard)
        seconds = stats.get("seconds", 0.0) + sum(r["search_s"] for r in final)
        out = pa.Table.from_pylist(final, schema=results_schema()).replace_schema_metadata(table.schema.metadata)
        phases.run.write_shard(shard.shard, out, shard_stats(final, stats.get("documents", 0), seconds))
