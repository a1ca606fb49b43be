"""Where a scan stands, read from its run directory alone: the phase it is in and each phase's counts,
rates and ETA (`acr-scan status` and its `--watch` view). It never talks to the driver, so it follows a
scan running anywhere that writes to a shared run directory.

The phase follows from what the phases committed, in their order: no plan.json: starting; a shard not
screened: screen; the certify plan not saved yet or a unit not done: certify; the search plan not saved
yet, or a unit not done while budget is left: search (every candidate's verdict); the audit plan not
saved yet or a unit not done (with --audit-sample above 0): audit (the recall sample); the tighten plan not
saved yet or a unit not done while budget is left: tighten (shrinking the decided prompts); a shard's
results not written: write; passages.parquet missing or older than the newest result: passages; else
complete.

Rates come from the wall-clock times of a phase's last commits (its done markers' mtimes), so they
count every worker at once; until two parts of a phase are done they fall back to what the parts'
stats recorded (work seconds) times --workers. The recall audit's: the price its draw was made at (the
scan's measured seconds per search, audit_plan.json) until it commits a unit, and before its draw what
--audit-sample will buy as the search stands (audit_ahead), so the search's ETA can say what follows it.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from scanner.config import parse_audit
from scanner.errors import InputError
from scanner.measures import budget as bm
from scanner.storage.integrity import read_json_object
from scanner.storage.lock import scan_process
from scanner.storage.passages import PASSAGES_FILE
from scanner.storage.progress import given_up
from scanner.storage.records import STOP, plan_spec, read_record
from scanner.storage.rundir import AUDIT_PLAN, CONFIG_FILE, PHASE_PLANS, PLAN_FILE, STOP_FILE, Plan, RunDir
from scanner.storage.store import Store

CERTIFY_PLAN, SEARCH_PLAN, TIGHTEN_PLAN = PHASE_PLANS
RECENT = 8  # commits a wall-clock rate is measured over: recent enough to follow a resumed run


def _mtime(path: Path) -> float | None:
    with contextlib.suppress(FileNotFoundError):
        return path.stat().st_mtime
    return None


def _commits(store: Store) -> list[tuple[float, int]]:
    """(mtime of the done marker, index), oldest first; a marker removed meanwhile (rewrite) is left out."""
    times = ((_mtime(store.done_path(i)), i) for i in store.done_parts())
    return sorted((t, i) for t, i in times if t is not None)


def wall_rate(commits: list[tuple[float, int]], amount: dict[int, float]) -> float | None:
    """`amount` per wall-clock second over the last RECENT commits; None below two commits."""
    window = commits[-(RECENT + 1) :]
    seconds = window[-1][0] - window[0][0] if len(window) >= 2 else 0.0
    return sum(amount.get(i, 0) for _, i in window[1:]) / seconds if seconds > 0 else None


def per_second(
    commits: list, amount: dict[int, float], work_s: float, workers: int
) -> tuple[float | None, str]:
    """(amount per second, how it was measured): wall clock, else the work time of the done parts
    with `workers` at once; (None, 'unknown') before a part recorded any."""
    wall = wall_rate(commits, amount)
    if wall:
        return wall, f"wall clock, last {_counted(min(len(commits) - 1, RECENT), 'commit')}"
    done = sum(amount.values())
    if work_s > 0 and done > 0:
        return (
            done / work_s * workers,
            f"work time of {_counted(len(commits), 'done part')}, --workers {workers}",
        )
    return None, "unknown until a part is done"


def _counted(count: int, what: str) -> str:
    return f"{count} {what}{'s' if count != 1 else ''}"


def eta(left: float, rate: float | None) -> float | None:
    return 0.0 if left <= 0 else left / rate if rate else None


def _screen(run: RunDir, plan: Plan, workers: int) -> dict:
    store = Store(run.path, "screen")
    commits = _commits(store)
    stats = {i: store.stats(i) for _, i in commits}
    docs = {s.shard: s.num_docs for s in plan}
    done_docs = {i: docs.get(i, 0) for i in stats}
    tokens = {i: s.get("tokens", 0) for i, s in stats.items()}
    work = sum(s.get("seconds", 0) for s in stats.values())
    docs_per_s, how = per_second(commits, done_docs, work, workers)
    tokens_per_s, _ = per_second(commits, tokens, work, workers)
    return {
        "shards_done": len(stats),
        "shards_total": len(plan),
        "docs_done": sum(done_docs.values()),
        "docs_total": plan.num_docs,
        "tokens": sum(tokens.values()),
        "spans": sum(s.get("spans", 0) for s in stats.values()),
        "candidates": sum(s.get("candidates", 0) for s in stats.values()),
        "tokens_per_s": tokens_per_s,
        "docs_per_s": docs_per_s,
        "rate": how,
        "work_s": work,
        "eta_s": eta(plan.num_docs - sum(done_docs.values()), docs_per_s),
        "commits": commits,
    }


def _units(run: RunDir, name: str, plan_file: str) -> tuple[list | None, list, dict]:
    """(the saved plan's units or None, the done units' commits, their stats by index)."""
    store = Store(run.path, name)
    units = (read_record(run.path / plan_file, plan_spec(plan_file), quiet=True) or {}).get("units")
    commits = _commits(store)
    return units, commits, {i: store.stats(i) for _, i in commits}


def _certify(run: RunDir, workers: int) -> dict:
    units, commits, stats = _units(run, "certify", CERTIFY_PLAN)
    work = sum(s.get("search_s", 0) for s in stats.values())
    units_per_s, how = per_second(commits, dict.fromkeys(stats, 1), work, workers)
    total = None if units is None else len(units)
    return {
        "units_done": len(stats),
        "units_total": total,
        "settled": sum(s.get("settled", 0) for s in stats.values()),
        "failed": sum(s.get("failed", 0) for s in stats.values()),
        "units_per_s": units_per_s,
        "rate": how,
        "work_s": work,
        "eta_s": None if total is None else eta(total - len(stats), units_per_s),
        "commits": commits,
    }


def stopped(run: RunDir, search_budget: str | None) -> dict | None:
    """Where --search-budget auto stopped the search (STOP_FILE, run/spend.py AutoStop.record), when the run
    still goes on with that budget; None otherwise, or when the record is not one."""
    record = read_record(run.path / STOP_FILE, STOP, quiet=True)  # status runs every few seconds
    if not record or record.get("budget") != search_budget or bm.parse_auto(search_budget) is None:
        return None
    return {
        k: record.get(k)
        for k in (
            "unit",
            "unit_name",
            "verdicts",
            "window",
            "memorized",
            "at_least",
            "why",
            "units_left",
            "candidates_left",
        )
    }


def _search(
    run: RunDir,
    workers: int,
    budget: bm.Budget | None,
    name: str = "search",
    spent_before: float = 0.0,
    stop: dict | None = None,
) -> dict:
    """A spending phase's section: search (verdicts) or tighten; `spent_before`: the budget the phases
    before it spent (search and tighten share one budget); `stop`: where --search-budget auto stopped it."""
    units, commits, stats = _units(run, name, SEARCH_PLAN if name == "search" else TIGHTEN_PLAN)
    cut = {i: cut_counts(s) for i, s in stats.items()}
    searched = {i: s.get("candidates", 0) - cut[i]["candidates_cut"] for i, s in stats.items()}
    work = sum(s.get("search_s", 0) for s in stats.values())
    done = sum(searched.values())
    per_s, how = per_second(commits, searched, work, workers)
    total = None if units is None else sum(len(u) for u in units)
    mine = bm.spent(list(stats.values()), budget)
    spent = spent_before + mine
    left, ends = None if total is None else total - done, "plan"
    if (
        budget is not None
        and left is not None
        and (by_budget := _left_by_budget(budget, spent, mine, done, left)) < left
    ):
        left, ends = by_budget, "budget"
    if stop is not None:
        left, ends = 0, "auto"
    units_cut = sum(bool(c["candidates_cut"]) for c in cut.values())
    return {
        "units_done": len(stats) - units_cut,
        "units_cut": units_cut,
        "units_total": None if units is None else len(units),
        "candidates_done": done,
        "candidates_total": total,
        "candidates_cut": sum(c["candidates_cut"] for c in cut.values()),
        "searches_cut": sum(c["searches_cut"] for c in cut.values()),
        "memorized": sum(s.get("memorized", 0) for s in stats.values()),
        "failed": sum(s.get("failed", 0) for s in stats.values()),
        "budget": {
            "kind": budget.kind if budget else "steps",
            "spent": spent,
            "total": budget.amount if budget else None,
        },
        "s_per_candidate": work / done if done else None,
        "candidates_per_s": per_s,
        "rate": how,
        "work_s": work,
        "eta_s": None if left is None else eta(left, per_s),
        "ends": ends,
        "over": left == 0,
        **({"stopped": stop} if stop else {}),
        "commits": commits,
    }


def _audit_off(spec) -> bool:
    """--audit-sample 0 (the run's saved spec); a spec that does not parse is not taken for off."""
    try:
        rule = parse_audit(spec)
    except InputError:
        return False
    return rule.kind == "count" and rule.amount == 0


def _audit(run: RunDir, workers: int, sample) -> dict:
    """The recall audit's section: its units (planned once the search's verdicts are in; the current
    draw's, not an earlier draw's kept parts), what they found, and until one commits the rate the
    draw was priced at (audit_plan.json: the scan's measured seconds per search)."""
    saved = read_record(run.path / AUDIT_PLAN, plan_spec(AUDIT_PLAN), quiet=True) or {}
    units, first = saved.get("units"), saved.get("first", 0)
    mine = set(range(first, first + len(units))) if units is not None else set()
    store = Store(run.path, "audit")
    commits = [(t, i) for t, i in _commits(store) if i in mine]
    stats = {i: store.stats(i) for _, i in commits}
    searched = {i: s.get("candidates", 0) for i, s in stats.items()}
    work = sum(s.get("search_s", 0) for s in stats.values())
    per_s, how = per_second(commits, searched, work, workers)
    priced = (saved.get("cost") or {}).get("per_search_s")
    if per_s is None and isinstance(priced, int | float) and priced > 0:
        per_s, how = (
            workers / priced,
            f"this scan's measured {priced:.1f} s per search (audit_plan.json), --workers {workers}",
        )
    total = None if units is None else sum(len(u) for u in units)
    done = sum(searched.values())
    return {
        "sample": sample,
        "off": _audit_off(sample),
        "why": saved.get("why"),
        "units_done": len(stats),
        "units_total": None if units is None else len(units),
        "candidates_done": done,
        "candidates_total": total,
        "memorized": sum(s.get("memorized", 0) for s in stats.values()),
        "candidates_per_s": per_s,
        "rate": how,
        "work_s": work,
        "eta_s": None if total is None else eta(total - done, per_s),
        "commits": commits,
    }


def audit_ahead(sample, search: dict, workers: int) -> float | None:
    """Before its draw, about how long the recall audit will take on `workers`, from the search's own
    figures: a share of the search's seconds at its end (spent, plus its ETA on every worker), a time as
    given, a count at the search's seconds per candidate; None when not known yet."""
    try:
        rule = parse_audit(sample)
    except InputError:
        return None
    if rule.kind == "share":
        return (
            None
            if search["eta_s"] is None
            else rule.amount * (search["work_s"] + search["eta_s"] * workers) / workers
        )
    if rule.kind == "seconds":
        return rule.amount / workers
    per = search["s_per_candidate"]
    return 0.0 if not rule.amount else None if per is None else rule.amount * per / workers


def cut_counts(stats: dict) -> dict:
    """What the search budget left undecided in a committed unit (its stats "cut", run/tasks.py): the
    candidates without a verdict, and of them the searches stopped mid-way (a relaunch with a larger
    budget goes on from where they stood; the others it starts)."""
    cut = stats.get("cut") or {}
    return {
        "candidates_cut": len(cut),
        "searches_cut": sum(bool(c.get("forwards") or c.get("resume")) for c in cut.values()),
    }


def _left_by_budget(budget: bm.Budget, spent: float, mine: float, done: int, left: int) -> float:
    """Candidates the rest of the budget pays for at this phase's cost per candidate so far (`mine` over
    `done`; all that are left while this phase spent nothing yet: its first unit always starts)."""
    if spent >= budget.amount:
        return 0
    return (budget.amount - spent) / (mine / done) if mine > 0 and done else left


def _write(run: RunDir, plan: Plan) -> dict:
    damaged = run.damaged()  # a shard whose results file is cut short is not written (a relaunch redoes it)
    commits = [(t, i) for t, i in _commits(run.results) if i not in damaged]
    shards_per_s = wall_rate(commits, {i: 1 for _, i in commits})
    return {
        "shards_done": len(commits),
        "shards_total": len(plan),
        "shards_per_s": shards_per_s,
        "eta_s": eta(len(plan) - len(commits), shards_per_s),
        "commits": commits,
    }


def _passages(run: RunDir, write: dict) -> dict:
    built = _mtime(run.path / PASSAGES_FILE)
    newest = max((t for t, _ in write["commits"]), default=None)
    current = built is not None and newest is not None and built >= newest
    return {"built": current, "eta_s": 0.0 if current else None}


def _phase(sections: dict) -> str:
    screen, certify, search, write = (sections[k] for k in ("screen", "certify", "search", "write"))
    if screen["shards_done"] < screen["shards_total"]:
        return "screen"
    if certify["units_total"] is None or certify["units_done"] < certify["units_total"]:
        return "certify"
    if certify["failed"] and search["candidates_total"] is None:  # stopped: a relaunch checks them again
        return "certify"
    if not search["over"]:  # a unit left and budget to start it; on Ray, units in flight then finish
        return "search"
    audit = sections["audit"]
    if (
        not audit["off"]
        and not search["failed"]
        and (audit["units_total"] is None or audit["units_done"] < audit["units_total"])
    ):
        return "audit"
    tighten = sections["tighten"]
    if tighten["units_total"] is None and search["candidates_done"] == search["candidates_total"]:
        # planned next, unless no budget is left or a failed verdict waits for a relaunch
        return "write" if search["budget_spent"] or search["failed"] else "tighten"
    if tighten["units_total"] is not None and not tighten["over"]:
        return "tighten"
    if write["shards_done"] < write["shards_total"]:
        return "write"
    return "complete" if sections["passages"]["built"] else "passages"


def progress(run: RunDir, workers: int = 1) -> dict:
    """The phase and every phase's progress, as plain values; `eta_s` is the current phase's (0 once
    complete, None where not yet known or where no scan runs: a killed run's phase is where it stopped)
    and `elapsed_s` the work seconds every phase recorded so far; `scan_process`: whether a scan runs;
    `given_up`: tasks the Ray driver gave up as hung (storage/progress.py)."""
    process = scan_process(run.path)
    if not (run.path / PLAN_FILE).exists():
        return {
            "phase": "starting",
            "eta_s": None,
            "elapsed_s": 0.0,
            "last_commit": None,
            "scan_process": process,
            "given_up": given_up(run.path),
        }
    plan = run.load_plan()
    saved = (read_json_object(run.path / CONFIG_FILE) or {}).get("config", {})
    budget = bm.parse_budget(saved.get("search_budget"))
    search = _search(run, workers, budget, stop=stopped(run, saved.get("search_budget")))
    search["budget_spent"] = budget is not None and search["budget"]["spent"] >= budget.amount
    sections = {
        "screen": _screen(run, plan, workers),
        "certify": _certify(run, workers),
        "search": search,
        "audit": _audit(run, workers, saved.get("audit_sample", 0)),
        "tighten": _search(run, workers, budget, "tighten", search["budget"]["spent"]),
        "write": _write(run, plan),
    }
    sections["passages"] = _passages(run, sections["write"])
    if sections["audit"]["units_total"] is None:  # not drawn yet: what it will cost, as the search stands
        sections["audit"]["eta_s"] = audit_ahead(sections["audit"]["sample"], search, workers)
    phase = _phase(sections)
    commits = [t for s in sections.values() for t, _ in s.get("commits", [])]
    for section in sections.values():
        section.pop("commits", None)  # mtimes are for the rates, not for the reader
    current = sections.get(phase, {}).get("eta_s") if phase != "complete" else 0.0
    if process["running"] is False and phase != "complete":
        current = None  # nothing is running: no end to expect until a relaunch
    return {
        "phase": phase,
        "eta_s": current,
        "last_commit": max(commits, default=None),
        "elapsed_s": sum(sections[k]["work_s"] for k in ("screen", "certify", "search", "audit", "tighten")),
        "scan_process": process,
        "given_up": given_up(run.path),
        **sections,
    }


def phase_counts(run: RunDir) -> dict:
    """The `phases` key of `acr-scan status`: screened shards, candidates, units, budget spent / total."""
    plan = run.load_plan()
    stores = {name: Store(run.path, name) for name in ("screen", "certify", "search", "tighten")}
    saved = (read_json_object(run.path / "run_config.json") or {}).get("config", {})
    budget = bm.parse_budget(saved.get("search_budget"))
    screened = [stores["screen"].stats(i) for i in stores["screen"].done_parts()]
    units = {
        name: (read_record(run.path / plan_file, plan_spec(plan_file), quiet=True) or {}).get("units")
        for name, plan_file in (("certify", CERTIFY_PLAN), ("search", SEARCH_PLAN), ("tighten", TIGHTEN_PLAN))
    }
    unit_stats = {name: [stores[name].stats(i) for i in stores[name].done_parts()] for name in units}
    results = run.status()
    return {
        "screened_shards": len(screened),
        "shards_total": len(plan),
        "candidates": sum(s.get("candidates", 0) for s in screened),
        "certified": sum(s.get("settled", 0) for s in unit_stats["certify"]),
        "certify_units": _units_done(unit_stats["certify"], units["certify"]),
        "search_units": _units_done(unit_stats["search"], units["search"]),
        "tighten_units": _units_done(unit_stats["tighten"], units["tighten"]),
        "budget": {
            "kind": budget.kind if budget else "steps",
            "spent": bm.spent(unit_stats["search"] + unit_stats["tighten"], budget),
            "total": budget.amount if budget else None,
        },
        "stopped": stopped(run, saved.get("search_budget")),
        "not_searched": results["status_counts"].get("not_searched", 0),
    }


def _units_done(stats: list[dict], planned: list | None) -> dict:
    """Units committed whole, units the budget cut (committed, pending a relaunch) and what they left."""
    cut = [cut_counts(s) for s in stats]
    return {
        "done": sum(not c["candidates_cut"] for c in cut),
        "cut": sum(bool(c["candidates_cut"]) for c in cut),
        "candidates_cut": sum(c["candidates_cut"] for c in cut),
        "searches_cut": sum(c["searches_cut"] for c in cut),
        "total": None if planned is None else len(planned),
    }
