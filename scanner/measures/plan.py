"""The projection of a whole-corpus scan from a plan's run (`acr-scan plan`): the screen and the
certificates of a seeded random sample of the documents (by default all of them), and the search of a
systematic sample of the candidates the scan would search. Pure arithmetic: it takes the plan run's
`cost` (scanner/storage/cost.py), per-document figures of the screened documents, the drawn candidates'
costs and counts of the whole corpus; no torch, no I/O.

Why two phases: the search is most of a scan's cost, and its cost per candidate depends on the outcome
(a memorized span is decided in a few steps, then tightened; a refuted one takes the whole schedule),
which the screen's rank predicts. Searching the best candidates of a 10 % sample of documents measured
24 searches of the library benchmark at 10.4 s each against the whole's 7.05 s (a 1.37x plan); the
screen is a small share of a scan, so the plan screens the whole corpus, knows exactly which candidates
the scan would search (its caps applied), and searches every k-th of them along the rank, an
equal-probability sample that holds each stretch of the rank in its share (implicit stratification).

Scaling: every additive figure X of the sample (tokens, screen seconds, candidates, steps, seconds,
passages) is projected as X * corpus_bytes / sample_bytes, a ratio estimator on the UTF-8 bytes of the
text column, which the whole corpus gives for the price of reading that column (no tokenization), so
documents of unequal length weigh by their length, not their count.

Ranges: a bootstrap over the sampled documents (DRAWS resamples with replacement, seeded) of each
figure's ratio to bytes; the range is the QUANTILES of the resampled ratio relative to the sample's
own, applied to the projection. It measures the spread between documents only: no finite-population
correction (so a sample of the whole corpus still gets a range, a conservative one), and a figure
the sample never saw (zero candidates) projects to 0..0, which says nothing of rare events.
"""

from __future__ import annotations

import math
import random

import numpy as np

from scanner.config import AuditRule
from scanner.errors import InputError
from scanner.measures import recall

DRAWS = 1000
QUANTILES = (0.05, 0.95)
RANGE = (
    f"bootstrap over the sampled documents ({DRAWS} resamples): {QUANTILES[0]:.0%}-{QUANTILES[1]:.0%} "
    "of each figure per byte of text, relative to the sample's own"
)
UNITS = {"--sample": "candidates (those the scan would search)", "--screen-sample": "documents"}


def _forms(option: str) -> str:
    return f"a share in (0, 1] with a decimal point (0.1) or a whole number of {UNITS[option].split(' (')[0]} (50)"


def parse_sample(text: str, option: str = "--sample") -> tuple[str, float]:
    """'0.1' -> ('share', 0.1); '50' -> ('count', 50). A share has a decimal point; a count has none."""
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"{option} {text!r} is not a number; give {_forms(option)}") from None
    if not math.isfinite(value):
        raise InputError(f"{option} {text!r} is not a finite number; give {_forms(option)}")
    if value <= 0:
        raise InputError(f"{option} {text!r} must be above 0; give {_forms(option)}")
    if "." in text or "e" in text.lower():
        if value > 1:
            raise InputError(
                f"{option} {text!r}: a share is at most 1 (all of them); for a count of "
                f"{UNITS[option]} give a whole number ({int(value) if value == int(value) else 'e.g. 50'})"
            )
        return "share", value
    return "count", value


def sample_size(kind: str, amount: float, documents: int, option: str = "--screen-sample") -> int:
    """Documents to sample of `documents`: at least one; a count above the corpus is refused."""
    if kind == "share":
        return max(1, round(amount * documents))
    if amount > documents:
        raise InputError(
            f"{option} {amount:g}: the corpus has only {documents} documents; give at most "
            f"{documents}, or a share (0.5)"
        )
    return int(amount)


def bootstrap(
    columns: dict[str, list[float]], weights: list[float], seed: int, draws: int = DRAWS
) -> dict[str, tuple[float, float]]:
    """{name: (low, high) multipliers}: QUANTILES of sum(x*)/sum(w*) over resampled documents, divided
    by sum(x)/sum(w); (1, 1) for a figure that is zero in the sample."""
    n = len(weights)
    w = np.asarray(weights, dtype=float)
    counts = np.random.default_rng(seed).multinomial(n, np.full(n, 1.0 / n), size=draws).astype(float)
    denominator = counts @ w
    out = {}
    for name, xs in columns.items():
        x = np.asarray(xs, dtype=float)
        own = x.sum() / w.sum() if w.sum() else 0.0
        if own == 0:
            out[name] = (1.0, 1.0)
            continue
        ratio = np.divide(counts @ x, denominator, out=np.zeros(draws), where=denominator > 0) / own
        low, high = np.quantile(ratio, QUANTILES)
        out[name] = (
            min(float(low), 1.0),
            max(float(high), 1.0),
        )  # a skewed resample must not exclude the point
    return out


def systematic(population: int, size: int, seed: int) -> list[int]:
    """`size` of range(population), one in each of `size` equal stretches at one seeded offset: every
    position has the chance size/population, and each stretch of the rank is drawn in its share."""
    if population <= 0 or size <= 0:
        return []
    size = min(size, population)
    step = population / size
    start = random.Random(seed).random() * step
    return [min(population - 1, math.floor(start + i * step)) for i in range(size)]


def drawn_size(kind: str, amount: float, population: int) -> int:
    """Candidates to draw of `population` for --sample (a share, or a count, at most the population)."""
    if population <= 0:
        return 0
    size = round(amount * population) if kind == "share" else int(amount)
    return min(population, max(2, size))  # two at least: one draw measures no spread


Z90 = 1.6449  # the normal 5 %-95 % interval, as the bootstrap's QUANTILES


def expand(values: list[float], screened: int, scale: float) -> tuple[float, float, float]:
    """(total, low, high) of a figure over the `screened` candidates the scan would search, from its
    `values` on a systematic sample of them (in rank order), times `scale` (whole corpus / screened
    documents). The variance is the successive-difference estimator of systematic sampling
    (Wolter, Introduction to Variance Estimation, 2.8: neighbours in the rank as strata of two), with
    the finite-population correction: a sample of every candidate has no range."""
    n = len(values)
    if not n:
        return 0.0, 0.0, 0.0
    total = screened * sum(values) / n
    if n < 2:  # drawn_size draws two unless one is all there is: then it is exact
        return total * scale, total * scale, total * scale
    s2 = sum((b - a) ** 2 for a, b in zip(values, values[1:], strict=False)) / (2 * (n - 1))
    se = screened * math.sqrt(max(0.0, 1 - n / screened) * s2 / n)
    return total * scale, max(0.0, total - Z90 * se) * scale, (total + Z90 * se) * scale


def search_figures(drawn: list[dict], screened: int, scale: float, where: str) -> dict[str, dict]:
    """The search's projected figures from the drawn candidates' rows (rank order: outcome, steps,
    seconds, decide and tighten summed): search_s, search_steps and per outcome candidates/steps/seconds."""
    columns = {"search_s": [d["seconds"] for d in drawn], "search_steps": [d["steps"] for d in drawn]}
    for name in sorted({d["outcome"] for d in drawn}):
        mine = [d["outcome"] == name for d in drawn]
        columns[f"{name}.candidates"] = [float(m) for m in mine]
        columns[f"{name}.steps"] = [d["steps"] * m for d, m in zip(drawn, mine, strict=True)]
        columns[f"{name}.seconds"] = [d["seconds"] * m for d, m in zip(drawn, mine, strict=True)]
    out = {}
    for name, values in columns.items():
        value, low, high = expand(values, screened, scale)
        out[name] = {"value": value, "low": low, "high": high, "source": where}
    out["not_searched"] = {"value": 0.0, "low": 0.0, "high": 0.0, "source": where}
    return out


def figure(value: float | None, spread: tuple[float, float], source: str) -> dict:
    """{value, low, high, source}; value None (not measured) stays None with no range."""
    if value is None:
        return {"value": None, "low": None, "high": None, "source": source}
    return {"value": value, "low": value * spread[0], "high": value * spread[1], "source": source}


def capped(fig: dict, cap: float) -> dict:
    """A figure no larger than `cap` (the search under a budget spends at most the budget)."""
    return {**fig, **{k: min(fig[k], cap) for k in ("value", "low", "high") if fig[k] is not None}}


def budget_needed(needed: dict, kind: str, given: float | None) -> dict:
    """What searching every projected candidate needs, in the budget's unit (`kind`), against the one
    given, and the share of the candidates the given one reaches: best first, each candidate assumed to
    cost the sample's mean (memorized ones, ranked first, usually settle sooner: a floor)."""
    out = {"kind": kind, "needed": needed, "given": given, "covers": None}
    if given is None or needed["value"] is None:
        return out

    def share(spent: float) -> float:
        return min(1.0, given / spent) if spent else 1.0

    # More needed, less covered: the high end of the need gives the low end of the share.
    out["covers"] = {
        "value": share(needed["value"]),
        "low": share(needed["high"]),
        "high": share(needed["low"]),
        "source": "the given budget / the budget needed; each candidate assumed to cost the mean",
    }
    return out


def wall(worker_s: dict, workers: int, efficiency: float) -> tuple[dict, dict]:
    """(wall seconds, worker-hours) of the projected worker-seconds on `workers` at `efficiency`."""
    check_workers(workers, efficiency)

    def scale(factor: float, why: str) -> dict:
        values = {
            k: (worker_s[k] * factor if worker_s[k] is not None else None) for k in ("value", "low", "high")
        }
        return {**values, "source": why}

    return (
        scale(
            1 / (workers * efficiency), f"worker seconds / ({workers} workers x efficiency {efficiency:g})"
        ),
        scale(1 / (efficiency * 3600), f"worker seconds / efficiency {efficiency:g} / 3600"),
    )


def check_workers(workers: int, efficiency: float) -> None:
    if workers < 1:
        raise InputError(f"--workers {workers}: give at least 1 (the workers the whole scan would run on)")
    if not 0 < efficiency <= 1:
        raise InputError(
            f"--efficiency {efficiency:g}: give a share in (0, 1] (bench/cluster/scale.py measures it)"
        )


# Each projected figure: (its total in the sample run's cost, the per-document figure that gives its spread).
def _totals(cost: dict) -> dict[str, float | None]:
    screen, certify, search, passages = (
        cost.get(k) or {} for k in ("screen", "certify", "search", "passages")
    )
    totals = {
        "corpus_tokens": screen.get("corpus_tokens"),
        "screen_s": screen.get("seconds"),
        "candidates": screen.get("candidates"),
        "certified": certify.get("settled", 0),
        "certify_s": certify.get("seconds", 0.0),
        "search_s": search.get("unit_seconds", search.get("seconds", 0.0)),
        "search_steps": search.get("steps", 0),
        "passages": passages.get("passages", 0),
        "passage_s": passages.get("extend_s", 0.0),
    }
    for name, spent in (search.get("outcomes") or {}).items():
        for key in ("candidates", "steps", "seconds"):
            totals[f"{name}.{key}"] = spent.get(key)
    _add_tightening(totals, cost.get("tighten") or {})
    return totals


def _add_tightening(totals: dict, tighten: dict) -> None:
    """The tighten units' steps and seconds on the spans they shrank (the candidates decided already
    counted), so each outcome's cost is its verdict's and its tightening's, as the rows sum them."""
    totals["search_s"] = (totals["search_s"] or 0.0) + (tighten.get("unit_seconds") or 0.0)
    totals["search_steps"] = (totals["search_steps"] or 0) + (tighten.get("steps") or 0)
    for name, spent in (tighten.get("outcomes") or {}).items():
        for key in ("steps", "seconds"):
            if totals.get(f"{name}.{key}") is not None:
                totals[f"{name}.{key}"] += spent.get(key) or 0


def _per_doc(docs: list[dict], names: list[str]) -> dict[str, list[float]]:
    spread = {"search_steps": "steps"}
    columns = {name: [d.get(spread.get(name, name), 0) or 0 for d in docs] for name in names}
    columns["worker_s"] = [
        sum(d.get(k, 0) or 0 for k in ("screen_s", "certify_s", "search_s", "passage_s")) for d in docs
    ]
    return columns


def project(
    cost: dict,
    docs: list[dict],
    corpus: dict,
    *,
    workers: int,
    efficiency: float,
    budget: tuple[str, float] | None = None,
    max_candidates: int | None = None,
    seed: int = 0,
    search: dict | None = None,
    every_document: bool = False,
    audit: AuditRule | None = None,
) -> dict:
    """The projection of the whole corpus: `cost` of the plan's run, `docs` the per-document figures of
    its screened documents (bytes and the names of _totals), `corpus` {documents, bytes} of the whole
    corpus; `budget` (kind, amount) and `max_candidates` cap the search as they would the whole scan.
    `search`: search_figures of a drawn sample of the candidates the scan would search (the caps'
    --max-candidates applied already); without it, the screened documents' own search is scaled.
    `every_document`: the plan screened the whole corpus, so the screen's figures are measured, not
    sampled (no range). `audit`: the scan's --audit-sample, whose searches (outside the budget) the
    projection counts at the sample's seconds per search (audit_figure)."""
    check_workers(workers, efficiency)
    sample_bytes = sum(d["bytes"] for d in docs)
    if not sample_bytes:
        raise InputError(
            "the sample's documents hold no text (0 bytes); give a larger --sample or another --seed"
        )
    scale = corpus["bytes"] / sample_bytes
    where = (
        "measured on the whole corpus"
        if every_document
        else f"measured in the sample ({len(docs)} documents, {sample_bytes:,} bytes) x corpus bytes / sample bytes"
    )
    totals = _totals(cost)
    totals["not_searched"] = sum(d.get("not_searched", 0) for d in docs)  # in the rows: the cost has what ran
    columns = _per_doc(docs, list(totals))
    spreads = bootstrap(columns, [d["bytes"] for d in docs], seed)
    if every_document:
        spreads = {name: (1.0, 1.0) for name in spreads}
    out = {name: figure(None if v is None else v * scale, spreads[name], where) for name, v in totals.items()}
    if search and not every_document:  # the candidates themselves come from sampled documents
        search = {name: _widened(fig, spreads.get(name, (1.0, 1.0))) for name, fig in search.items()}
    out.update(search or {})
    if search:  # passages merge memorized spans: the plan's run found the certified and drawn ones only
        out["passages"]["source"] = out["passage_s"]["source"] = (
            where + "; of the certified and drawn spans: a floor"
        )
    limit, reached, search_s = _reach(out, _outcomes(out), budget, None if search else max_candidates)
    audit_s = audit_figure(out, search_s, audit)
    worker = [out[k] for k in ("screen_s", "certify_s", "passage_s")] + [search_s, audit_s]
    if search:  # the drawn search's range beside the screen's, each at its own end: a conservative sum
        worker_s = {k: sum(f[k] or 0 for f in worker) for k in ("value", "low", "high")}
        worker_s["source"] = (
            "the screen's, certificates' and passages' figures plus the drawn search's and the audit's"
        )
    else:
        value = sum(f["value"] or 0 for f in worker)
        worker_s = figure(
            value,
            spreads["worker_s"],
            where + "; the search capped by --search-budget/--max-candidates" if reached < 1 else where,
        )
    wall_s, worker_h = wall(worker_s, workers, efficiency)
    return {
        "scale": {"value": scale, "source": "corpus bytes / screened bytes"},
        "figures": out,
        "searched_share": {
            "value": reached,
            "source": "--max-candidates and --search-budget against the "
            "projected candidates and their cost (1: every candidate)",
        },
        "search_s": search_s,
        "audit_s": audit_s,
        "worker_s": worker_s,
        "wall_s": wall_s,
        "worker_h": worker_h,
        "budget": limit,
        "range": _range_text(every_document, bool(search)),
    }


def audit_figure(out: dict, search_s: dict, rule: AuditRule | None) -> dict:
    """The recall audit's projected worker-seconds (it runs outside the budget, after the search): its
    searches as recall.audit_size buys them with the search's projected seconds under the caps, each at
    the sample's seconds per refuted search (most audit draws are refuted), or per search when none was;
    `searches` says how many. No rule (--audit-sample 0) or no search measured: 0."""
    names = [n for n in recall.REFUTED if (out.get(f"{n}.candidates") or {}).get("value")] or _outcomes(out)
    count = sum(out[f"{n}.candidates"]["value"] or 0 for n in names)
    seconds = sum(out[f"{n}.seconds"]["value"] or 0 for n in names)
    per = seconds / count if count else None
    if rule is None or (rule.kind == "count" and not rule.amount):
        return {
            "value": 0.0,
            "low": 0.0,
            "high": 0.0,
            "searches": 0,
            "per_search_s": per,
            "source": "no audit",
        }
    cost = {"spent_s": 0.0, "per_search_s": per, "basis": "the plan's drawn searches, measured"}
    sizes = {
        k: recall.audit_size(rule, {**cost, "spent_s": search_s[k] or 0.0}) for k in ("value", "low", "high")
    }
    if rule.kind == "count" and per is None:
        return {
            "value": None,
            "low": None,
            "high": None,
            "searches": int(rule.amount),
            "per_search_s": None,
            "source": f"--audit-sample: {rule}, not priced: the plan searched nothing",
        }
    return {
        **{k: n * (per or 0.0) for k, (n, _) in sizes.items()},
        "searches": sizes["value"][0],
        "per_search_s": per,
        "source": f"--audit-sample: {sizes['value'][1]}"
        + (f", at {per:.1f} s a search (the plan's drawn searches)" if rule.kind == "count" else ""),
    }


SEARCH_RANGE = (
    f"{QUANTILES[0]:.0%}-{QUANTILES[1]:.0%} normal interval of the systematic sample's total "
    "(successive differences along the rank, finite-population corrected)"
)


def _widened(fig: dict, spread: tuple[float, float]) -> dict:
    """The drawn search's range widened by the spread between the screened documents (the document
    bootstrap's multipliers of the same figure): relative half-widths added in quadrature, as of two
    independent stages of sampling."""
    value = fig["value"]
    if not value:
        return fig
    low = math.hypot(1 - fig["low"] / value, 1 - spread[0])
    high = math.hypot(fig["high"] / value - 1, spread[1] - 1)
    return {**fig, "low": value * max(0.0, 1 - low), "high": value * (1 + high)}


def _range_text(every_document: bool, drawn: bool) -> str:
    screen = "the screen's figures: none (every document screened)" if every_document else RANGE
    search = SEARCH_RANGE + ("" if every_document else ", and the documents' bootstrap in quadrature")
    return screen + ("; the search: " + search if drawn else "")


def _reach(out: dict, outcomes: list[str], budget, max_candidates) -> tuple[dict, float, dict]:
    """(the budget's figures, the share of the candidates searched, the search's seconds) of the whole
    scan: the caps cut the projected search of every candidate, best first."""
    searched = sum((out[f"{o}.candidates"]["value"] or 0) for o in outcomes)
    needed = out["search_steps"] if budget and budget[0] == "steps" else out["search_s"]
    limit = budget_needed(needed, budget[0] if budget else "seconds", budget[1] if budget else None)
    cap = 1.0 if not max_candidates or not searched else min(1.0, max_candidates / searched)
    reached = min(cap, limit["covers"]["value"] if limit["covers"] else 1.0)
    search_s = capped(out["search_s"], out["search_s"]["value"] * reached) if reached < 1 else out["search_s"]
    return limit, reached, search_s


def _outcomes(figures: dict) -> list[str]:
    return sorted({name.split(".")[0] for name in figures if name.endswith(".candidates")})
