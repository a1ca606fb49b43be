"""Pure math of the search phase: parse --search-budget, rank candidates by screen evidence, cut the
ranking into units, and decide from what committed units recorded whether another unit may start.

No torch, no I/O: the phases (scanner/run/units.py, spend.py) feed it rows and unit stats. Everything here
is a function of its arguments, so a relaunch that reads the same committed units decides the same.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

# The budget's parse is the config's (a run's identity); re-exported for the phases' math.
from scanner.config import AUTO_RULE, BUDGET_FORMS, Budget, parse_auto, parse_budget  # noqa: F401


def certificate_bound(row: dict) -> float:
    """|y| / |c| of the span's natural-prefix certificate (a lower bound on its ACR); 0 without one."""
    cert = row.get("certificate_tokens")
    return row["target_tokens"] / cert if cert else 0.0


def settles(row: dict) -> bool:
    """A certificate shorter than the span proves ACR > 1 once generation verifies it: no GCG needed."""
    cert = row.get("certificate_tokens")
    return cert is not None and 0 < cert < row["target_tokens"]


def evidence_key(row: dict) -> tuple:
    """Best evidence sorts first: the higher certificate bound, then the higher greedy-match rate, then
    the lower mean NLL; span_id breaks ties, so the order never depends on corpus order."""
    nll = row.get("mean_nll")
    return (
        -certificate_bound(row),
        -(row.get("greedy_match_rate") or 0.0),
        nll if nll is not None else float("inf"),
        row["span_id"],
    )


def rank(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=evidence_key)


def fresh_first(ranked: list[dict], found: list[tuple[int, int, int]]) -> tuple[list[dict], set[str]]:
    """The rank order rearranged so the budget reaches what is not yet known first. Candidates of one
    document whose token ranges touch or overlap form a run (a passage, if any is memorized); round r
    holds the r-th best candidate of every run, so no run gets a second search before every run had its
    first. Runs that touch a span already found memorized (`found`: (doc_row, token_start, token_end),
    the certified spans) come after all others: their passage is known, and a search there adds a bound,
    not a finding. Returns (the order, the span_ids of the known runs)."""
    run_of, known_runs = _runs(ranked, found)
    turn: dict[tuple, int] = defaultdict(int)
    keyed = []
    for i, row in enumerate(ranked):
        run = run_of[row["span_id"]]
        keyed.append((run in known_runs, turn[run], i))
        turn[run] += 1
    order = [ranked[i] for *_, i in sorted(keyed)]
    return order, {r["span_id"] for r in ranked if run_of[r["span_id"]] in known_runs}


def _runs(ranked: list[dict], found: list[tuple[int, int, int]]) -> tuple[dict[str, tuple], set[tuple]]:
    """{span_id: its run's key (doc_row, first token)} and the keys of runs holding a found range."""
    by_doc: dict[int, list[tuple[int, int, str | None]]] = defaultdict(list)
    for row in ranked:
        by_doc[row["doc_row"]].append((row["token_start"], row["token_end"], row["span_id"]))
    for doc, start, end in found:
        if doc in by_doc:  # a found span beside no candidate marks no run
            by_doc[doc].append((start, end, None))
    run_of, known = {}, set()
    for doc, ranges in by_doc.items():
        key, reach = None, -1
        for start, end, span in sorted(ranges, key=lambda r: (r[0], r[1])):
            if start > reach:  # a gap: a new run starts here
                key = (doc, start)
            reach = max(reach, end)
            if span is None:
                known.add(key)
            else:
                run_of[span] = key
    return run_of, known


def target_key(row: dict) -> str:
    """The identity of a span's search: its target token ids (the search's seed follows the copy
    searched), as a short digest for plan files; a row read with its key already made (run/dropped.py,
    the screen's rows by the million) gives that."""
    key = row.get("target_key")
    return key if key is not None else ids_key(np.asarray(row["target_ids"], dtype="<i8").tobytes())


def ids_key(data) -> str:
    """The digest of token ids as little-endian int64 bytes: a column's buffer hashes with no Python ints."""
    return ids_digest(data).hex()


def ids_digest(data) -> bytes:
    """ids_key's 16 bytes, unprinted (a column of millions holds them as fixed-size binary)."""
    return hashlib.sha256(data).digest()[:16]


def distinct(ranked: list[dict], key, known: dict | None = None) -> tuple[list[dict], dict[str, list]]:
    """The first row of each `key(row)` in rank order (searched), and the others as copies of it:
    ({searched span_id: [[shard, span_id], ...]}). `known`: {key: span_id} already settled elsewhere,
    whose copies are collected too but that are not searched again."""
    first, searched, copies = dict(known or {}), [], {}
    for row in ranked:
        k = key(row)
        if k in first:
            copies.setdefault(first[k], []).append([row["shard"], row["span_id"]])
            continue
        first[k] = row["span_id"]
        searched.append(row)
    return searched, copies


def units(items: list, size: int) -> list[list]:
    """Consecutive runs of `size` items (the last may be shorter)."""
    if size < 1:
        raise ValueError(f"unit size {size} must be >= 1")
    return [items[i : i + size] for i in range(0, len(items), size)]


def spent(unit_stats: list[dict], budget: Budget | None) -> float:
    """What the committed units recorded, in the budget's kind (steps, else seconds)."""
    key = "steps" if budget is None or budget.kind == "steps" else "search_s"
    return float(sum(s.get(key, 0) for s in unit_stats))


def may_start(spent_so_far: float, budget: Budget | None) -> bool:
    """Another unit may start while anything of the budget is left (a unit may overshoot it)."""
    return budget is None or spent_so_far < budget.amount


def deadline(spent_so_far: float, budget: Budget | None, workers: int, now: float) -> float | None:
    """The wall-clock instant a seconds budget runs out at, `workers` units spending it at once (the
    budget counts each unit's seconds, so k workers spend it k times as fast); None for a steps budget
    or none: those are checked between units only, so a steps budget gives the same table every run."""
    if budget is None or budget.kind != "seconds":
        return None
    return now + max(0.0, budget.amount - spent_so_far) / max(1, workers)


@dataclass(frozen=True)
class Stop:
    """Where --search-budget auto stopped: before search unit `unit`, after `verdicts` verdicts along the
    rank, of which the last `window` held `memorized` memorized, fewer than the rule's `at_least`."""

    unit: int
    verdicts: int
    window: int
    memorized: int
    at_least: int

    def why(self) -> str:
        return (
            f"yield of the last {self.window} searched candidates {self.memorized} of {self.window}, below "
            f"the auto threshold {self.at_least}/{self.window}"
        )

    def to_json(self) -> dict:
        return {
            "unit": self.unit,
            "verdicts": self.verdicts,
            "window": self.window,
            "memorized": self.memorized,
            "at_least": self.at_least,
        }


def auto_stop(units: list[list[bool] | None], rule: tuple[int, int] = AUTO_RULE) -> Stop | None:
    """The first unit boundary, along the rank, where every unit before it is done and fewer than M of
    the last W verdicts before it were memorized (`rule` = (M, W)); None while there is none.

    `units[i]`: search unit i's verdicts in rank order (True: memorized; copies count once, as the plan
    holds one candidate per target), or None while the unit is not done. Only a done prefix is judged,
    so units that finish out of order (several workers) never move a stop already reached, and a
    relaunch that reads the same committed units stops at the same unit. Fewer than W verdicts never
    stop: the window must be full."""
    at_least, window = rule
    trail: list[bool] = []
    for index, verdicts in enumerate(units):
        last = trail[-window:]
        if len(last) == window and sum(last) < at_least:
            return Stop(index, len(trail), window, sum(last), at_least)
        if verdicts is None:
            return None
        trail.extend(verdicts)
    return None
