"""What a scan has cost so far, phase by phase, in the units a cost model multiplies: read from the
stats every committed part recorded (screen parts, certify and search units, run/tasks.py unit_cost)
and from the passages table, so a projection of a larger run starts from this run's figures, never
from constants. A phase with nothing committed yet is null; a figure a part did not record (its stats
unreadable: a relaunch redoes that part) is null too, never a guess.

Screen: corpus tokens and what the model forwarded for them (window, span and certificate rows), so
`reencoding` = forwarded / corpus tokens. Search (the verdicts) and tighten (shrinking the decided
prompts, the same spans again): steps, forwards and seconds by outcome (memorized, not memorized,
rejected early, failed) and by stage (deciding: up to and including a search's first verified success;
shrinking: after it; the driver's attribution). A span's row sums both phases' costs.
"""

from __future__ import annotations

from scanner.storage.passages import PASSAGES_FILE
from scanner.storage.rundir import RunDir
from scanner.storage.store import Store

SOURCE = "measured in this run"
SCREEN_WORK = ("screen_rows", "forwarded_tokens", "padded_tokens", "head_positions")
SPENT = ("candidates", "steps", "forwards", "seconds")


def _total(stats: list[dict], key: str):
    """The sum of `key` over the parts; None when a part did not record it (its stats unreadable)."""
    values = [s.get(key) for s in stats]
    return None if any(v is None for v in values) else sum(values)


def _ratio(part, whole) -> float | None:
    return part / whole if part is not None and whole else None


def _stats(run: RunDir, name: str) -> list[dict]:
    store = Store(run.path, name)
    return [store.stats(i) for i in store.done_parts()]


def _screen(stats: list[dict]) -> dict | None:
    if not stats:
        return None
    tokens, spans, candidates = (_total(stats, k) for k in ("tokens", "spans", "candidates"))
    work = {k: _total(stats, k) for k in SCREEN_WORK}
    return {
        "source": SOURCE,
        "parts": len(stats),
        "corpus_tokens": tokens,
        **work,
        "seconds": _total(stats, "seconds"),
        "reencoding": _ratio(work["forwarded_tokens"], tokens),
        "spans": spans,
        "candidates": candidates,
        "candidate_share": _ratio(candidates, spans),
    }


def _certify(stats: list[dict], candidates: int | None) -> dict | None:
    if not stats:
        return None
    certificates, settled = _total(stats, "candidates"), _total(stats, "settled")
    return {
        "source": SOURCE,
        "units": len(stats),
        "certificates": certificates,
        "settled": settled,
        "settled_share": _ratio(settled, candidates),
        "settled_share_of_certificates": _ratio(settled, certificates),
        "seconds": _total(stats, "search_s"),
        "verify_s": _cost_total(stats, "verify_s"),
    }


def _cost_total(stats: list[dict], key: str):
    return _total([s.get("cost") or {} for s in stats], key)


def _spent(parts: list[dict]) -> dict:
    """Summed candidates/steps/forwards/seconds (those present) and their mean per candidate."""
    keys = [k for k in SPENT if all(k in p for p in parts)]
    total = {k: sum(p[k] for p in parts) for k in keys}
    count = total.get("candidates")
    total["per_candidate"] = (
        {k: _ratio(total[k], count) for k in keys if k != "candidates"} if count else None
    )
    return total


def _split(costs: list[dict], key: str) -> dict | None:
    """{name: spent} of each unit's cost[key] (outcomes or stages), summed; None if a unit lacks it."""
    if not costs or any(not c.get(key) for c in costs):
        return None
    names = {name for c in costs for name in c[key]}
    return {name: _spent([c[key][name] for c in costs if name in c[key]]) for name in sorted(names)}


def _search(stats: list[dict]) -> dict | None:
    if not stats:
        return None
    costs = [s.get("cost") or {} for s in stats]
    outcomes, stages = _split(costs, "outcomes"), _split(costs, "stages")
    total = _spent(list(outcomes.values())) if outcomes else None
    steps = total["steps"] if total else None
    shrinking = stages.get("shrinking", {}).get("steps") if stages else None
    return {
        "source": SOURCE,
        "units": len(stats),
        "candidates": _total(stats, "candidates"),
        "steps": _total(stats, "steps"),
        "forwards": _total(stats, "forwards"),
        "seconds": total["seconds"] if total else None,
        "unit_seconds": _total(stats, "search_s"),
        "per_candidate": total["per_candidate"] if total else None,
        "outcomes": outcomes,
        "stages": stages,
        "shrinking_share_of_steps": _ratio(shrinking, steps),
        "verify_s": _cost_total(stats, "verify_s"),
    }


def _passages(run: RunDir) -> dict | None:
    """Passages and the seconds of their extension, once passages.parquet is written."""
    import pyarrow.parquet as pq

    path = run.path / PASSAGES_FILE
    if not path.is_file():
        return None
    table = pq.read_table(path, columns=["extend_s"])
    return {
        "source": SOURCE,
        "passages": table.num_rows,
        "extend_s": sum(v or 0.0 for v in table.column("extend_s").to_pylist()),
    }


def _shared(certify: list[dict], search: list[dict], key: str) -> dict | None:
    """Seconds both phases' units recorded under cost[key] (verification, calibration)."""
    units = certify + search
    if not units:
        return None
    return {
        "source": SOURCE,
        "seconds": _cost_total(units, key),
        "certify_s": _cost_total(certify, key),
        "search_s": _cost_total(search, key),
    }


def run_cost(run: RunDir) -> dict:
    """The `cost` key of `acr-scan status`: every phase's measured figures and their ratios (null where
    the phase has not committed anything yet)."""
    screen, certify, search, audit, tighten = (
        _stats(run, name) for name in ("screen", "certify", "search", "audit", "tighten")
    )
    screened = _screen(screen)
    return {
        "source": SOURCE,
        "screen": screened,
        "certify": _certify(certify, screened["candidates"] if screened else None),
        "search": _search(search),
        "tighten": _search(tighten),
        # The recall audit's searches: their own line, outside the search budget (run/phases.py).
        "audit": _search(audit),
        "verification": _shared(certify, search + tighten, "verify_s"),
        "calibration": _shared(certify, search + tighten, "calibration_s"),
        "passages": _passages(run),
    }
