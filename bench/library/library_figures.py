"""The library benchmark's figures from a finished run: recall of the planted passages, what else was
flagged, how well each screen statistic predicts the searched verdict, and the phases' wall clock.

Each result row (a span) is placed by its character range in its document (doc_id = the file name,
whose first four digits index truth.json's documents): `plant xN` when 90 % or more of its characters
lie in one occurrence of a passage planted N times, `heldout`, `header`, `toc`, `counting` alike, the
same name with `~` when it only overlaps one (less than 90 %), `background` otherwise. A memorized
background span is a false positive when the training text does not hold it (a document the model
was trained on only in excerpts); one it holds twice or more is real text repeated (boilerplate code, a
licence header), memorization the scan should report; each is counted apart.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from pathlib import Path

import pyarrow.parquet as pq

from scanner.measures.probe import ranks
from scanner.storage.passages import PASSAGES_FILE
from scanner.storage.store import Store

COLUMNS = ["doc_id", "span_id", "char_start", "char_end", "text", "status", "acr", "acr_kind", "memorized",
           "calibrated_memorized", "predictable_reason", "steps", "greedy_match_rate", "mean_nll", "pz_greedy",
           "log10_pz_topk", "certificate_tokens", "anchored", "rejected_early", "certificate_prompt", "target_ids",
           "target_tokens"]
SEARCHED = ("memorized", "not_memorized")
CANDIDATE = ("memorized", "not_memorized", "not_searched", "failed")


def rows(run: Path) -> list[dict]:
    return pq.read_table(run / "results", columns=COLUMNS).to_pylist()


def category(row: dict, regions: dict[int, list[dict]]) -> str:
    doc, length = int(row["doc_id"][:4]), max(row["char_end"] - row["char_start"], 1)
    best, share = None, 0.0
    for r in regions.get(doc, []):
        overlap = min(r["end"], row["char_end"]) - max(r["start"], row["char_start"])
        if overlap > 0 and overlap / length > share:
            best, share = r, overlap / length
    if best is None:
        return "background"
    name = f"plant x{best['count']}" if best["kind"] == "plant" else best["kind"]
    return name if share >= 0.9 else f"{name}~"


def by_category(table: list[dict], truth: dict) -> dict[str, dict]:
    """Per category: spans, candidates, searched, memorized (by certificate, by search), calibrated."""
    regions = defaultdict(list)
    for r in truth["regions"]:
        regions[r["doc"]].append(r)
    out: dict[str, Counter] = defaultdict(Counter)
    for row in table:
        row["category"] = category(row, regions)
        c = out[row["category"]]
        c["spans"] += 1
        c["candidates"] += row["status"] in CANDIDATE
        c["searched"] += row["status"] in SEARCHED and row["acr_kind"] != "certificate_bound"
        c["memorized"] += bool(row["memorized"])
        c["by_certificate"] += bool(row["memorized"]) and row["acr_kind"] == "certificate_bound"
        c["calibrated_memorized"] += bool(row["calibrated_memorized"])
        c["not_searched"] += row["status"] == "not_searched"
    return {k: dict(v) for k, v in sorted(out.items())}


def recall(table: list[dict], truth: dict) -> dict:
    """Per duplication count: planted spans (90 % inside a planted copy) memorized over all of them and
    over the candidates; copies and passages with at least one memorized span."""
    occurrences: dict[tuple, bool] = {}
    scanned = {int(row["doc_id"][:4]) for row in table}
    for region in truth["regions"]:
        if region["kind"] == "plant" and region["doc"] in scanned:
            occurrences[(region["doc"], region["start"])] = False
    per: dict[int, Counter] = defaultdict(Counter)
    for row in table:
        if not row["category"].startswith("plant x") or row["category"].endswith("~"):
            continue
        count = int(row["category"][7:])
        per[count]["spans"] += 1
        per[count]["candidates"] += row["status"] in CANDIDATE
        per[count]["memorized"] += bool(row["memorized"])
        if row["memorized"]:
            occurrences[_occurrence(row, truth)] = True
    out = {}
    for count, c in sorted(per.items()):
        copies = [k for k in occurrences if _count_of(k, truth) == count]
        out[f"x{count}"] = {**c, "recall": _share(c["memorized"], c["spans"]),
                            "recall_of_candidates": _share(c["memorized"], c["candidates"]),
                            "copies": len(copies), "copies_found": sum(occurrences[k] for k in copies)}
    return out


def _occurrence(row: dict, truth: dict) -> tuple:
    """(document, start) of the planted copy the row overlaps most."""
    doc = int(row["doc_id"][:4])
    copies = [r for r in truth["regions"] if r["doc"] == doc and r["kind"] == "plant"]
    best = max(copies, key=lambda r: min(r["end"], row["char_end"]) - max(r["start"], row["char_start"]))
    return (doc, best["start"])


def _count_of(key: tuple, truth: dict) -> int:
    return next(r["count"] for r in truth["regions"] if (r["doc"], r["start"]) == key and r["kind"] == "plant")


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def flagged_elsewhere(table: list[dict], trained: str) -> dict:
    """Memorized spans outside every planted and rule region, by how often the training text holds
    their text: twice or more (repeated real text: memorization a scan should find), once (seen once
    per pass over the training text), never (a document the model was not trained on, or a span
    across an excerpt's edge: false positives). Memorized spans of held-out passages are false too."""
    flagged = [r for r in table if r["memorized"] and r["category"] == "background"]
    seen = {"repeated": [], "once": [], "never": []}
    for row in flagged:
        count = trained.count(row["text"])
        seen["repeated" if count >= 2 else "once" if count == 1 else "never"].append(row)
    heldout = [r for r in table if r["memorized"] and r["category"].startswith("heldout")]
    out = {"memorized_background": len(flagged), "heldout_memorized": len(heldout)}
    for name, group in seen.items():
        out[f"{name}_in_training"] = len(group)
        out[f"{name}_in_training_calibrated"] = sum(bool(r["calibrated_memorized"]) for r in group)
    out["false_positives"] = len(seen["never"]) + len(heldout)
    out["examples"] = {name: [r["text"][:80] for r in group[:3]] for name, group in seen.items() if group}
    return out


def auc(scores: list[float], labels: list[bool]) -> float | None:
    """ROC AUC by the rank-sum (Mann-Whitney) formula, ties given their mean rank."""
    positives = sum(labels)
    negatives = len(labels) - positives
    if not positives or not negatives:
        return None
    rank_sum = sum(r for r, y in zip(ranks(scores), labels, strict=True) if y)
    return round((rank_sum - positives * (positives + 1) / 2) / (positives * negatives), 4)


STATISTICS = {
    "greedy_match_rate": lambda r: r["greedy_match_rate"],
    "pz_greedy": lambda r: r["pz_greedy"],
    "log10_pz_topk": lambda r: r["log10_pz_topk"],
    "-mean_nll": lambda r: -r["mean_nll"],
    "-certificate_tokens": lambda r: -r["certificate_tokens"] if r["certificate_tokens"] is not None else -math.inf,
}


def predictive_power(table: list[dict]) -> dict:
    """ROC AUC of each screen statistic against `memorized`, over the candidates the search ran GCG on
    and over every candidate with a verdict (certificate-settled ones included)."""
    out = {}
    for name, subset in (("searched", lambda r: r["status"] in SEARCHED and r["acr_kind"] != "certificate_bound"),
                         ("with_verdict", lambda r: r["status"] in SEARCHED)):
        chosen = [r for r in table if subset(r)]
        labels = [bool(r["memorized"]) for r in chosen]
        out[name] = {"n": len(chosen), "memorized": sum(labels),
                     **{s: auc([_finite(f(r)) for r in chosen], labels) for s, f in STATISTICS.items()}}
    return out


def sampled_power(table: list[dict], recorded: list[dict]) -> dict:
    """ROC AUC as in predictive_power over the candidates searched (the scan's verdict) and those the
    budget left that were searched again with the full budget (bench/library/library_reject.py: their verdict),
    a sample that reaches below the budget's line."""
    verdicts = {r["span_id"]: r["memorized"] for r in table if r["status"] in SEARCHED and r["acr_kind"] != "certificate_bound"}
    verdicts.update({t["span_id"]: t["memorized"] for t in recorded if t["scan_status"] == "not_searched"})
    chosen = [r for r in table if r["span_id"] in verdicts]
    labels = [bool(verdicts[r["span_id"]]) for r in chosen]
    return {"n": len(chosen), "memorized": sum(labels),
            **{s: auc([_finite(f(r)) for r in chosen], labels) for s, f in STATISTICS.items()}}


def _finite(value) -> float:
    return -math.inf if value is None else float(value)


def identical(table: list[dict]) -> dict:
    """Candidates with a text another candidate shares: what searching identical spans once would save."""
    searched = [r for r in table if r["status"] in SEARCHED]
    texts = Counter(r["text"] for r in searched)
    return {"with_verdict": len(searched), "distinct_texts": len(texts),
            "largest_group": max(texts.values(), default=0)}


def phase_walls(run: Path, started: float, ended: float) -> dict:
    """Wall-clock seconds of each phase from the commit times of its parts (done markers' mtimes):
    screen from the command's start (model load included), each later phase from the one before's
    last commit, `exit` from the passages table to the command's end."""
    def last(name: str) -> float | None:
        store = Store(run, name)
        times = [store.done_path(i).stat().st_mtime for i in store.done_parts()]
        return max(times, default=None)

    marks = {"screen": last("screen"), "certify": last("certify"), "search": last("search"),
             "tighten": last("tighten"), "write": max((p.stat().st_mtime for p in (run / "done").glob("*")), default=None)}
    passages = run / PASSAGES_FILE
    marks["passages"] = passages.stat().st_mtime if passages.is_file() else None
    out, before = {}, started
    for name, mark in marks.items():
        if mark is not None:
            out[name] = round(mark - before, 2)
            before = mark
    out["exit"] = round(ended - before, 2)
    return out


def _within(predicted: dict, actual: float | None) -> dict:
    value = predicted.get("value")
    ratio = value / actual if value is not None and actual else None
    return {"predicted": value, "low": predicted.get("low"), "high": predicted.get("high"), "actual": actual,
            "ratio": None if ratio is None else round(ratio, 3),
            "in_range": None if value is None or actual is None else predicted["low"] <= actual <= predicted["high"]}


def _measured(cost: dict) -> dict:
    """The whole scan's figures under the names of the plan's projection (status's cost)."""
    screen, certify = cost.get("screen") or {}, cost.get("certify") or {}
    search, tighten = cost.get("search") or {}, cost.get("tighten") or {}

    def seconds(part: dict) -> float:
        return part.get("unit_seconds", part.get("seconds")) or 0.0

    out = {"corpus_tokens": screen.get("corpus_tokens"), "screen_s": screen.get("seconds"),
           "candidates": screen.get("candidates"), "certified": certify.get("settled", 0),
           "certify_s": certify.get("seconds", 0.0), "search_s": seconds(search) + seconds(tighten)}
    out["worker_s"] = sum(out[k] or 0 for k in ("screen_s", "certify_s", "search_s"))
    return out


def plan_against(planned: dict, timed: dict, runs: dict) -> dict:
    """The plan's projection beside the whole library's scans: wall time (local: 1 worker, efficiency 1 as
    planned; Ray: the plan's worker seconds over 2 workers x 0.85, its default efficiency) and each figure
    against the local scan's own; the plan's own cost (its wall time, a share of the local scan's)."""
    p, local = planned["projection"], runs["local"]
    measured = _measured(local["cost"])
    out = {"sample": {k: planned["sample"].get(k) for k in ("documents", "of", "bytes", "tokens", "caps", "drawn",
                                                             "population")},
           "plan_wall_s": timed["wall_s"], "plan_share_of_local_wall": round(timed["wall_s"] / local["wall_s"], 3),
           "wall_local": _within(p["wall_s"], local["wall_s"]),
           "figures": {k: _within(p["figures"][k], measured[k]) for k in measured if k in p["figures"]}}
    out["figures"]["search_s_under_caps"] = _within(p["search_s"], measured["search_s"])
    out["figures"]["worker_s"] = _within(p["worker_s"], measured["worker_s"])
    if "ray" in runs:
        two = {k: (p["worker_s"][k] / (2 * 0.85) if p["worker_s"][k] is not None else None)
               for k in ("value", "low", "high")}
        out["wall_ray"] = _within(two, runs["ray"]["wall_s"])
    return out
