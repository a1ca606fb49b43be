"""The report's recall section: what the budget and the screen left unsearched, as the recall audit
estimates it (recall.json, written by run/audit.py from measures/recall.py), one row per stratum."""

from __future__ import annotations

from scanner.results.html_format import count as _count
from scanner.results.html_format import esc as _e

CSS = "table.recall td, table.recall th{padding:2px 8px;text-align:right}table.recall td:first-child{text-align:left}"


def _range(low, high) -> str:
    return f"{low}" if low == high else f"{low} to {high}"


def _recall_words(recall: dict) -> str:
    """One sentence: found, the estimated missed count and its interval, the recall it gives."""
    level = f"{recall['confidence']:.0%}"
    missed = recall["missed"]
    point = "unknown" if missed is None else f"{missed:g}"
    said = (
        f"The scan found {_count(recall['found'], 'memorized span')} (distinct targets). The recall audit "
        f"searched {recall['drawn']} spans drawn at random from what it left unsearched and found "
        f"{recall['hits']} memorized among them: the unsearched are estimated to hold {point} more "
        f"({level} interval: {_range(recall['missed_low'], recall['missed_high'])})."
    )
    if recall.get("recall") is not None:
        said += (
            f" Recall: {recall['recall']:.0%} ({level} interval {recall['recall_low']:.0%} to "
            f"{recall['recall_high']:.0%})."
        )
    return said


def _row(s: dict) -> str:
    missed = "–" if s["missed"] is None else f"{s['missed']:g}"
    return (
        f"<tr><td>{_e(s['stratum'])}</td><td>{s['total']}</td><td>{s['drawn']}</td><td>{s['hits']}</td>"
        f"<td>{missed}</td><td>{_range(s['missed_low'], s['missed_high'])}</td></tr>"
    )


def recall_html(recall: dict | None) -> str:
    if not recall:
        return (
            '<p class="meta">No recall audit in this run (--audit-sample 0, or nothing was left '
            "unsearched): the report cannot say what the unsearched spans hold.</p>"
        )
    rows = "".join(_row(s) for s in recall["strata"])
    head = "<tr><th>stratum</th><th>spans</th><th>drawn</th><th>memorized</th><th>missed, estimate</th><th>interval</th></tr>"
    return (
        f'<p>{_e(_recall_words(recall))}</p>\n<table class="recall">{head}{rows}</table>\n'
        f'<p class="meta">{_e(recall["method"])}; seed {recall.get("seed")}.</p>'
    )
