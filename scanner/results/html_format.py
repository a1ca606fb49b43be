"""Escaping and number formatting for the HTML report's sections (report.py, report_documents.py): one
copy, so a value reads the same in every section. Every untrusted string goes through `esc`."""

from __future__ import annotations

import html
import math


def esc(value) -> str:
    return html.escape(str(value), quote=True)


def num(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) >= 1000 else f"{value:.4g}"
    return str(value)


def count(n: int, noun: str) -> str:
    return f"{num(n)} {noun}{'' if n == 1 else 's'}"


def status_facts(counts: dict[str, int]) -> str:
    """'3 memorized, 1 screened out' from {status: rows}, zero counts left out."""
    return ", ".join(f"{num(n)} {esc(s.replace('_', ' '))}" for s, n in counts.items() if n)
