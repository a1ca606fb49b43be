"""The projection of a whole-corpus scan from the scan of a random sample of its documents (`acr-scan
plan`). Pure arithmetic: it takes the sample run's `cost` (scanner/storage/cost.py), per-document
figures of the sample and counts of the whole corpus; no torch, no I/O.

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

import numpy as np

from scanner.errors import InputError

DRAWS = 1000
QUANTILES = (0.05, 0.95)
RANGE = (f"bootstrap over the sampled documents ({DRAWS} resamples): {QUANTILES[0]:.0%}-{QUANTILES[1]:.0%} "
         "of each figure per byte of text, relative to the sample's own")
SAMPLE_FORMS = "a share in (0, 1] with a decimal point (0.1) or a whole number of documents (50)"


def parse_sample(text: str) -> tuple[str, float]:
    """'0.1' -> ('share', 0.1); '50' -> ('count', 50). A share has a decimal point; a count has none."""
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"--sample {text!r} is not a number; give {SAMPLE_FORMS}") from None
    if not math.isfinite(value) or value <= 0:
        raise InputError(f"--sample {text!r} must be above 0; give {SAMPLE_FORMS}")
    if "." in text or "e" in text.lower():
        if value > 1:
            raise InputError(f"--sample {text!r}: a share is at most 1 (the whole corpus); for a count of "
                             f"documents give a whole number ({int(value) if value == int(value) else 'e.g. 50'})")
        return "share", value
    return "count", value


def sample_size(kind: str, amount: float, documents: int) -> int:
    """Documents to sample of `documents`: at least one; a count above the corpus is refused."""
    if kind == "share":
        return max(1, round(amount * documents))
    if amount > documents:
        raise InputError(f"--sample {amount:g}: the corpus has only {documents} documents; give at most "
                         f"{documents}, or a share (0.5)")
    return int(amount)


def bootstrap(columns: dict[str, list[float]], weights: list[float], seed: int,
              draws: int = DRAWS) -> dict[str, tuple[float, float]]:
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
        out[name] = (min(float(low), 1.0), max(float(high), 1.0))  # a skewed resample must not exclude the point
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
    out["covers"] = {"value": share(needed["value"]), "low": share(needed["high"]), "high": share(needed["low"]),
                     "source": "the given budget / the budget needed; each candidate assumed to cost the mean"}
    return out


def wall(worker_s: dict, workers: int, efficiency: float) -> tuple[dict, dict]:
    """(wall seconds, worker-hours) of the projected worker-seconds on `workers` at `efficiency`."""
    check_workers(workers, efficiency)

    def scale(factor: float, why: str) -> dict:
        values = {k: (worker_s[k] * factor if worker_s[k] is not None else None) for k in ("value", "low", "high")}
        return {**values, "source": why}

    return (scale(1 / (workers * efficiency), f"worker seconds / ({workers} workers x efficiency {efficiency:g})"),
            scale(1 / (efficiency * 3600), f"worker seconds / efficiency {efficiency:g} / 3600"))


def check_workers(workers: int, efficiency: float) -> None:
    if workers < 1:
        raise InputError(f"--workers {workers}: give at least 1 (the workers the whole scan would run on)")
    if not 0 < efficiency <= 1:
        raise InputError(f"--efficiency {efficiency:g}: give a share in (0, 1] (bench/scale.py measures it)")


# Each projected figure: (its total in the sample run's cost, the per-document figure that gives its spread).
def _totals(cost: dict) -> dict[str, float | None]:
    screen, certify, search, passages = (cost.get(k) or {} for k in ("screen", "certify", "search", "passages"))
    totals = {"corpus_tokens": screen.get("corpus_tokens"), "screen_s": screen.get("seconds"),
              "candidates": screen.get("candidates"), "certified": certify.get("settled", 0),
              "certify_s": certify.get("seconds", 0.0),
              "search_s": search.get("unit_seconds", search.get("seconds", 0.0)),
              "search_steps": search.get("steps", 0), "passages": passages.get("passages", 0),
              "passage_s": passages.get("extend_s", 0.0)}
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
    columns["worker_s"] = [sum(d.get(k, 0) or 0 for k in ("screen_s", "certify_s", "search_s", "passage_s"))
                           for d in docs]
    return columns


def project(cost: dict, docs: list[dict], corpus: dict, *, workers: int, efficiency: float,
            budget: tuple[str, float] | None = None, max_candidates: int | None = None, seed: int = 0,
            capped_sample: bool = False) -> dict:
    """The projection of the whole corpus: `cost` of the sample's run, `docs` the per-document figures
    of the sample (bytes and the names of _totals), `corpus` {documents, bytes} of the whole corpus;
    `budget` (kind, amount) and `max_candidates` cap the search as they would the whole scan;
    `capped_sample`: the sample ran under them scaled to its share (scanner/run/plan.py), so what
    searching every candidate needs is extrapolated from the ones it searched."""
    check_workers(workers, efficiency)
    sample_bytes = sum(d["bytes"] for d in docs)
    if not sample_bytes:
        raise InputError("the sample's documents hold no text (0 bytes); give a larger --sample or another --seed")
    scale = corpus["bytes"] / sample_bytes
    where = f"measured in the sample ({len(docs)} documents, {sample_bytes:,} bytes) x corpus bytes / sample bytes"
    totals = _totals(cost)
    totals["not_searched"] = sum(d.get("not_searched", 0) for d in docs)  # in the rows: the cost has what ran
    columns = _per_doc(docs, list(totals))
    spreads = bootstrap(columns, [d["bytes"] for d in docs], seed)
    out = {name: figure(None if v is None else v * scale, spreads[name], where) for name, v in totals.items()}
    limit, reached, search_s = _reach(out, _outcomes(totals), budget, max_candidates, capped_sample)
    worker = {"screen_s", "certify_s", "passage_s"}
    value = sum(out[k]["value"] or 0 for k in worker) + (search_s["value"] or 0)
    worker_s = figure(value, spreads["worker_s"], where + "; the search capped by --search-budget/--max-candidates"
                      if reached < 1 else where)
    wall_s, worker_h = wall(worker_s, workers, efficiency)
    return {"scale": {"value": scale, "source": "corpus bytes / sample bytes"}, "figures": out,
            "searched_share": {"value": reached, "source": "--max-candidates and --search-budget against the "
                               "projected candidates and their cost (1: every candidate)"},
            "search_s": search_s, "worker_s": worker_s, "wall_s": wall_s, "worker_h": worker_h, "budget": limit,
            "range": RANGE}


def _reach(out: dict, outcomes: list[str], budget, max_candidates, capped_sample: bool) -> tuple[dict, float, dict]:
    """(the budget's figures, the share of the candidates searched, the search's seconds) of the whole scan.
    A sample run without the caps searched every candidate: the caps cut its cost here, best first. A
    sample run under them (scaled) spent what the capped scan spends of its share already."""
    searched = sum((out[f"{o}.candidates"]["value"] or 0) for o in outcomes)
    unsearched = out["not_searched"]["value"] or 0
    needed = out["search_steps"] if budget and budget[0] == "steps" else out["search_s"]
    if capped_sample:
        needed = _all_searched(needed, searched, unsearched)
    limit = budget_needed(needed, budget[0] if budget else "seconds", budget[1] if budget else None)
    if capped_sample:
        return limit, searched / (searched + unsearched) if searched + unsearched else 1.0, out["search_s"]
    cap = 1.0 if not max_candidates or not searched else min(1.0, max_candidates / searched)
    reached = min(cap, limit["covers"]["value"] if limit["covers"] else 1.0)
    search_s = capped(out["search_s"], out["search_s"]["value"] * reached) if reached < 1 else out["search_s"]
    return limit, reached, search_s


def _all_searched(spent: dict, searched: float, unsearched: float) -> dict:
    """What searching the capped sample's unsearched candidates too would need: the searched ones' mean
    each. They were ranked below the searched ones, which are decided sooner when memorized: a floor."""
    if not searched or spent["value"] is None:
        return spent
    factor = (searched + unsearched) / searched
    return {**{k: spent[k] * factor for k in ("value", "low", "high")},
            "source": spent["source"] + f"; x{factor:.2f}: the searched candidates' mean for the unsearched too"}


def _outcomes(totals: dict) -> list[str]:
    return sorted({name.split(".")[0] for name in totals if name.endswith(".candidates")})
