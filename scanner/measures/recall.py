"""What a budgeted scan left unsearched, estimated from a random audit sample: pure arithmetic, no torch,
no I/O.

Two parts of a corpus go unsearched: candidates past the budget (`not_searched`) and spans the screen
dropped (`screened_out`). An audit draws a seeded random sample of each, stratified by screen score (the
few high-scoring spans are where misses are likeliest, so each stratum gets its own share of the
draws), and searches the drawn spans with the scan's own schedule. Memorized spans among the drawn are
found; what the rest of each stratum still holds is estimated here.

The interval is exact, not asymptotic: in a stratum of N spans of which K are memorized, a sample of n
drawn without replacement holds X ~ Hypergeometric(N, K, n). The interval on K is the set of K the
observed x does not reject at level α/2 on either side (Clopper-Pearson's construction on the
hypergeometric, so the finite population is exact, and at x = 0 the upper bound is the largest K a
clean sample of n still allows: no normal approximation at zero hits). The missed count of a stratum is
K - x (the drawn hits were searched, so found). Strata combine by Bonferroni: each stratum's bounds
at level α/H, summed, a conservative interval on the total that holds at least at 1 - α.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from scanner.config import AuditRule
from scanner.errors import require

CONFIDENCE = 0.95
METHOD = (
    "stratified random audit sample; per stratum an exact hypergeometric interval on the memorized "
    "count (finite population, valid at zero hits), strata combined by Bonferroni"
)


def hypergeom_pmf(x: int, total: int, marked: int, drawn: int) -> float:
    """P(X = x): x marked among `drawn` taken without replacement from `total` of which `marked` are."""
    if x < max(0, drawn - (total - marked)) or x > min(drawn, marked):
        return 0.0
    return math.comb(marked, x) * math.comb(total - marked, drawn - x) / math.comb(total, drawn)


def hypergeom_cdf(x: int, total: int, marked: int, drawn: int) -> float:
    """P(X <= x)."""
    return min(1.0, sum(hypergeom_pmf(i, total, marked, drawn) for i in range(0, x + 1)))


def _largest(ok, lo: int, hi: int) -> int:
    """The largest k in [lo, hi] with ok(k), ok monotone (true then false); lo if none."""
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid - 1)
    return lo


def exact_interval(hits: int, drawn: int, total: int, alpha: float) -> tuple[int, int]:
    """The exact two-sided (1 - alpha) interval on the marked count K of a population of `total`, from
    `hits` marked among `drawn` drawn without replacement."""
    require(
        0 <= hits <= drawn <= total, f"audit counts out of order: {hits} hits of {drawn} drawn of {total}"
    )
    unseen = total - drawn
    # Upper: the largest K with P(X <= hits | K) > alpha/2 (P falls as K grows).
    upper = _largest(lambda k: hypergeom_cdf(hits, total, k, drawn) > alpha / 2, hits, hits + unseen)
    # Lower: the smallest K with P(X >= hits | K) > alpha/2 (P rises with K).
    if hits == 0:
        return 0, upper
    rejects = lambda k: 1.0 - hypergeom_cdf(hits - 1, total, k, drawn) <= alpha / 2  # noqa: E731
    lower = _largest(rejects, hits - 1, hits + unseen) + 1  # hits - 1 always rejects: P(X >= hits) = 0
    return lower, upper


@dataclass(frozen=True)
class Stratum:
    """One stratum of the unsearched: `total` spans, `drawn` of them searched by the audit, `hits` of
    those memorized."""

    name: str
    total: int
    drawn: int
    hits: int


def estimate(strata: list[Stratum], confidence: float = CONFIDENCE) -> dict:
    """Per stratum and in all: the memorized spans the unsearched hold beyond the audit's hits (point
    estimate and interval), and the audit's own counts."""
    require(0 < confidence < 1, f"confidence {confidence} must be in (0, 1)")
    alpha = (1 - confidence) / max(1, len(strata))
    rows = []
    for s in strata:
        lo, hi = exact_interval(s.hits, s.drawn, s.total, alpha)
        point = s.hits * (s.total - s.drawn) / s.drawn if s.drawn else None
        rows.append(
            {
                "stratum": s.name,
                "total": s.total,
                "drawn": s.drawn,
                "hits": s.hits,
                "missed": None if point is None else round(point, 2),
                "missed_low": lo - s.hits,
                "missed_high": hi - s.hits,
            }
        )
    known = all(r["missed"] is not None or r["total"] == 0 for r in rows)
    return {
        "method": METHOD,
        "confidence": confidence,
        "strata": rows,
        "drawn": sum(s.drawn for s in strata),
        "hits": sum(s.hits for s in strata),
        "missed": round(sum(r["missed"] or 0 for r in rows), 2) if known else None,
        "missed_low": sum(r["missed_low"] for r in rows),
        "missed_high": sum(r["missed_high"] for r in rows),
    }


def allocate(sizes: list[int], draws: int) -> list[int]:
    """Draws per stratum: an equal share each (the small high-score strata get as many draws as the
    large low-score one), a stratum's leftover passed to the others, never more than a stratum holds."""
    require(draws >= 0, f"--audit-sample {draws} must be >= 0")
    out = [0] * len(sizes)
    left = min(draws, sum(sizes))
    while left:
        open_ = [i for i, n in enumerate(sizes) if out[i] < n]
        share = max(1, left // len(open_))
        for i in open_:
            take = min(share, sizes[i] - out[i], left)
            out[i] += take
            left -= take
            if not left:
                break
    return out


SHARES = (0.05, 0.20)  # the top 5 % of the screen score, the next 20 %, the rest


def strata_by_score(
    ids: list[str], scores: list[float], shares: tuple[float, ...] = SHARES
) -> list[list[str]]:
    """The ids cut along the screen score (highest first) into len(shares) + 1 strata: high scores are
    rare and likeliest to hold a miss, so they stand apart and get their own draws."""
    return cut_along(
        [i for _, i in sorted(zip(scores, ids, strict=True), key=lambda p: (-p[0], p[1]))], shares
    )


def cut_along(order: Sequence, shares: tuple[float, ...] = SHARES) -> list[Sequence]:
    """`order` (best first) cut into len(shares) + 1 consecutive strata of those shares, the rest last."""
    strata, start = [], 0
    for share in shares:
        end = start + math.ceil(len(order) * share)
        strata.append(order[start:end])
        start = end
    return [*strata, order[start:]]


def draw(strata: list[Sequence], draws: int, seed: int, order=sorted) -> list[list[str]]:
    """A seeded simple random sample of each stratum, of allocate()'s sizes; `order(stratum)`: its ids
    in code-point order as a sequence (sorted; a caller holding millions in a column gives its own)."""
    rng = random.Random(seed)
    return [
        sorted(rng.sample(order(s), n))
        for s, n in zip(strata, allocate([len(s) for s in strata], draws), strict=True)
    ]


PARTS = ("not_searched", "screened_out")  # what the audit samples: left by the budget, dropped by the screen
STRATA = ("top", "next", "rest")  # along the rank: SHARES' top 5 %, the next 20 %, the rest


def plan_strata(parts: dict[str, Sequence], sample: int, seed: int, order=sorted) -> list[dict]:
    """The audit's strata and draws: `parts` gives each part's span ids in rank order (best screen
    evidence first); each part is cut along that rank into STRATA, and `sample` draws are shared among
    the non-empty strata (allocate); `order` as draw's. Returns [{"name": "part/stratum", "total", "drawn": [ids]}]."""
    strata = []
    for part, ids in parts.items():
        strata += [
            (f"{part}/{name}", members)
            for name, members in zip(STRATA, cut_along(ids), strict=True)
            if len(members)
        ]
    draws = draw([members for _, members in strata], sample, seed, order)
    return [
        {"name": name, "total": len(members), "drawn": drawn}
        for (name, members), drawn in zip(strata, draws, strict=True)
    ]


def summary(strata: list[dict], hits: dict[str, int], found: int, confidence: float = CONFIDENCE) -> dict:
    """recall.json: the scan's `found` memorized spans (distinct targets, the audit's hits included), the
    estimate of what the unsearched still hold per stratum and in all (`hits`: {stratum: memorized among
    its drawn}), and the recall that follows: found / (found + missed), with the interval the missed
    count's interval gives."""
    out = estimate(
        [Stratum(s["name"], s["total"], len(s["drawn"]), hits.get(s["name"], 0)) for s in strata], confidence
    )
    low, high = out["missed_low"], out["missed_high"]
    ratio = lambda missed: round(found / (found + missed), 4) if found + missed else None  # noqa: E731
    return {
        **out,
        "found": found,
        "recall": None if out["missed"] is None else ratio(out["missed"]),
        "recall_low": ratio(high),
        "recall_high": ratio(low),
    }


AUDIT_MAX = 64  # the most draws a share or a time buys: an explicit count is the way to a larger audit
REFUTED = ("not_memorized", "rejected_early")  # what most audit draws turn out: the dearer outcomes


def search_cost(units: list[dict]) -> dict:
    """What the budgeted search's committed units spent (their stats, run/tasks.py) and what one audit
    search is expected to cost: the seconds per search of the refuted candidates (most audit draws are
    refuted, and a refutation runs the whole decision schedule), or of all candidates when none was
    refuted; None when nothing was searched. {spent_s, searches, per_search_s, basis}."""
    spent = sum(u.get("search_s") or 0.0 for u in units)
    outcomes = [(u.get("cost") or {}).get("outcomes") or {} for u in units]
    total = {
        name: [sum((o.get(name) or {}).get(k) or 0 for o in outcomes) for k in ("candidates", "seconds")]
        for name in {n for o in outcomes for n in o}
    }
    refuted = [sum(total.get(n, [0, 0])[i] for n in REFUTED) for i in (0, 1)]
    every = [sum(v[i] for v in total.values()) for i in (0, 1)]
    count, seconds, basis = *refuted, "refuted searches of this scan, measured"
    if not count:  # memorized ones end at their first verified prompt: cheaper than most audit draws
        count, seconds, basis = *every, "searches of this scan, none refuted: a floor"
    return {
        "spent_s": round(spent, 3),
        "searches": every[0],
        "per_search_s": round(seconds / count, 3) if count else None,
        "basis": f"{count} {basis}" if count else "no search measured",
    }


def audit_size(rule: AuditRule, cost: dict) -> tuple[int, str]:
    """(draws, why) of the audit `rule` asks for, given search_cost's `cost`: a count as given; a share
    of the search's seconds or a time, in whole searches at the measured seconds per search (rounded
    down: the audit costs at most what was asked), at most AUDIT_MAX. Nothing measured buys nothing."""
    if rule.kind == "count":
        return int(rule.amount), f"{rule.amount:g} searches, as given"
    per = cost["per_search_s"]
    allowance = rule.amount * cost["spent_s"] if rule.kind == "share" else rule.amount
    asked = (
        f"{rule.amount:.0%} of the {cost['spent_s']:.0f} s the budgeted search spent = {allowance:.0f} s"
        if rule.kind == "share"
        else f"{allowance:.0f} s"
    )
    if not per:
        return 0, f"{asked}; no search measured what a search costs here, so it buys none"
    bought = math.floor(allowance / per + 1e-9)
    draws = min(AUDIT_MAX, bought)
    most = f", at most {AUDIT_MAX}" if bought > AUDIT_MAX else ""
    return draws, f"{asked} at {per:.1f} s a search ({cost['basis']}): {bought} searches{most}"
