"""The report's documents: a table row for each document with a finding, one compact summary of the rest.

A finding is something a reader of the report has to look at in that document:
- a memorized span (status memorized: the run's verdict at its main τ, what the histogram and the
  passages use; a span memorized only at a data-dependent threshold is in `export --tau NAME`);
- a calibrated flag (calibrated_memorized): acr-scan sets it only on memorized spans, so it adds no
  document of its own in its tables; it is counted for tables made by other tools;
- a memorized passage (passages.parquet), which the strips draw;
- a failed span: an error left part of the document unscanned (retried on resume).
Documents without any are summarized in one section: how many, their tokens and spans by status, the few
closest to being flagged (highest greedy-match rate of the screen) and a collapsed list of their ids, so
every document is accounted for while the page grows with the findings, not with the corpus.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa

from scanner.results.html_format import count, esc, num, status_facts
from scanner.schema import STATUSES

SEARCHED = ("memorized", "not_memorized")
MAX_DOCUMENTS = 200  # documents with findings in the table; a corpus of thousands would bury the worst
CLOSEST = 5  # documents without findings named as the closest to being flagged
MAX_LISTED_IDS = 10_000  # ids in the collapsed list; past it the page names the export that lists all
CSS = (
    "details.quiet{margin:8px 0}details.quiet summary{cursor:pointer;color:#57606a;font-size:13px}"
    "ol.ids{columns:4 14em;font:12px ui-monospace,Menlo,Consolas,monospace;margin:6px 0;"
    "overflow-wrap:anywhere}"
)


def longest_run(flags: Iterable[bool]) -> int:
    """Length of the longest stretch of consecutive true values."""
    best = current = 0
    for flag in flags:
        current = current + 1 if flag else 0
        best = max(best, current)
    return best


@dataclass(frozen=True)
class DocStats:
    doc_id: str
    spans: int
    memorized: int
    longest_run: int  # consecutive memorized spans, in token_start order
    top_acr: float | None  # highest ACR of a searched span; None when no span was searched
    failed: int = 0
    calibrated: int = 0  # spans with calibrated_memorized
    passages: int = 0  # rows of passages.parquet in this document
    tokens: int = 0  # as far as its spans reach (the largest token_end)
    best_match: float | None = None  # highest greedy-match rate over its screened spans
    fragile: int = 0  # memorized spans whose generation margin is below the fragile threshold

    @property
    def share(self) -> float:
        return self.memorized / self.spans if self.spans else 0.0

    @property
    def has_findings(self) -> bool:
        return bool(self.memorized or self.calibrated or self.passages or self.failed)


def document_keys(table: pa.Table) -> list[tuple[str, str]]:
    """Per row, (doc_id, doc_row): two documents may share an id, never a corpus row. A table without
    doc_row (made by hand) groups by doc_id alone."""
    ids = table["doc_id"].to_pylist()
    rows = table["doc_row"].to_pylist() if "doc_row" in table.column_names else [None] * len(ids)
    return [(doc, row or "") for doc, row in zip(ids, rows, strict=True)]


def _passage_counts(passages: pa.Table | None, by_row: bool) -> dict[tuple[str, str], int]:
    counts: dict[tuple[str, str], int] = {}
    if passages is None:
        return counts
    rows = passages.select(["doc_id", "doc_row"]).to_pylist()
    for p in rows:
        key = (p["doc_id"], (p["doc_row"] or "") if by_row else "")
        counts[key] = counts.get(key, 0) + 1
    return counts


def _column(table: pa.Table, name: str) -> list:
    return table[name].to_pylist() if name in table.column_names else [None] * table.num_rows


def _one_document(doc_id: str, rows: list[dict], passages: int) -> DocStats:
    rows.sort(key=lambda r: r["token_start"])  # shards of one document may arrive in any order
    acrs = [
        r["acr"] for r in rows if r["status"] in SEARCHED and r["acr"] is not None and math.isfinite(r["acr"])
    ]
    matches = [r["match"] for r in rows if r["match"] is not None]
    flags = [r["status"] == "memorized" for r in rows]
    return DocStats(
        doc_id=doc_id,
        spans=len(rows),
        memorized=sum(flags),
        longest_run=longest_run(flags),
        top_acr=max(acrs, default=None),
        failed=sum(r["status"] == "failed" for r in rows),
        calibrated=sum(bool(r["calibrated"]) for r in rows),
        passages=passages,
        tokens=max(r["token_end"] for r in rows),
        best_match=max(matches, default=None),
        fragile=sum(bool(r["fragile"]) and r["status"] == "memorized" for r in rows),
    )


def _by_document(table: pa.Table, passages: pa.Table | None) -> dict[tuple[str, str], DocStats]:
    cols = table.select(["token_start", "token_end", "status", "acr"]).to_pydict()
    cols["match"] = _column(table, "greedy_match_rate")
    cols["calibrated"] = _column(table, "calibrated_memorized")
    cols["fragile"] = _column(table, "fragile")
    groups: dict[tuple[str, str], list[dict]] = {}
    for i, key in enumerate(document_keys(table)):
        groups.setdefault(key, []).append({name: values[i] for name, values in cols.items()})
    counted = _passage_counts(passages, "doc_row" in table.column_names)
    return {key: _one_document(key[0], rows, counted.get(key, 0)) for key, rows in groups.items()}


def document_stats(table: pa.Table, passages: pa.Table | None = None) -> list[DocStats]:
    """Per document, in order of first appearance; `passages`: the run's passages table, counted per
    document (a passage is a finding even where its spans' rows are not in `table`)."""
    return list(_by_document(table, passages).values())


def _acr_rank(d: DocStats) -> float:
    return -(d.top_acr if d.top_acr is not None else -1)


def _share_cell(share: float) -> str:
    return (
        f'<td class="num">{share:.0%} <span class="track"><span class="fill" '
        f'style="width:{share * 100:.0f}%"></span></span></td>'
    )


def _findings_html(found: list[DocStats]) -> str:
    if not found:
        return '<p class="meta">No document has a finding (a memorized span, a passage or a failed span).</p>'
    ranked = sorted(found, key=lambda d: (-d.memorized, -d.passages, -d.failed, _acr_rank(d)))
    shown = ranked[:MAX_DOCUMENTS]
    rows = "".join(
        f'<tr><td class="doc">{esc(d.doc_id)}</td><td class="num">{num(d.spans)}</td>'
        f'<td class="num">{num(d.memorized)}</td>{_share_cell(d.share)}'
        f'<td class="num">{num(d.longest_run)}</td><td class="num">{num(d.top_acr)}</td>'
        f'<td class="num">{num(d.failed)}</td><td class="num">{num(d.fragile)}</td></tr>'
        for d in shown
    )
    cut = f"; the first {num(len(shown))} shown" if len(shown) < len(found) else ""
    note = (
        f"{count(len(found), 'document')} with findings (a memorized span, a passage or a failed span), "
        f"most memorized spans first{cut}"
    )
    return (
        f'<p class="meta">{note}.</p><table class="documents"><thead><tr><th>document</th>'
        '<th class="num">spans</th><th class="num">memorized</th><th class="num">memorized share</th>'
        '<th class="num">longest run</th><th class="num">top ACR</th><th class="num">failed</th>'
        '<th class="num" title="memorized spans whose generation margin is below the fragile threshold">'
        "fragile</th></tr>"
        f"</thead><tbody>{rows}</tbody></table>"
    )


def _closest_html(quiet: list[DocStats]) -> str:
    scored = sorted(
        (d for d in quiet if d.best_match is not None), key=lambda d: (-d.best_match, _acr_rank(d))
    )
    screened = scored[:CLOSEST]
    if not screened:
        return ""
    # the table's rows against the count above it: which documents it ranks, and why the others are absent
    unscored = len(quiet) - len(scored)
    which = (
        f"The {count(len(screened), 'document')} closest to being flagged, of the {num(len(scored))} "
        "whose spans the screen scored"
        + (f" ({num(unscored)} had no span the screen scored)" if unscored else "")
    )
    rows = "".join(
        f'<tr><td class="doc">{esc(d.doc_id)}</td><td class="num">{num(d.spans)}</td>'
        f'<td class="num">{num(d.best_match)}</td><td class="num">{num(d.top_acr)}</td></tr>'
        for d in screened
    )
    return (
        f'<p class="meta">{which}: the highest greedy-match rate of the screen (the '
        "share of a span's tokens the model predicts from the text before it), with the top ACR of its "
        'searched spans (none memorized).</p><table class="closest"><thead><tr><th>document</th>'
        '<th class="num">spans</th><th class="num">best greedy-match rate</th>'
        f'<th class="num">top ACR</th></tr></thead><tbody>{rows}</tbody></table>'
    )


def _ids_html(quiet: list[DocStats]) -> str:
    listed = quiet[:MAX_LISTED_IDS]
    more = (
        (
            f"; the first {num(len(listed))} listed, every row is in the results table "
            "(<code>acr-scan export RUN --all</code>)"
        )
        if len(listed) < len(quiet)
        else ""
    )
    items = "".join(f"<li>{esc(d.doc_id)}</li>" for d in listed)
    return (
        f'<details class="quiet"><summary>Their {count(len(quiet), "document id")}, in table order'
        f'{more}</summary><ol class="ids">{items}</ol></details>'
    )


def _quiet_html(quiet: list[DocStats], statuses: dict[str, int]) -> str:
    if not quiet:
        return ""
    facts = status_facts(statuses)
    tokens, spans = count(sum(d.tokens for d in quiet), "token"), count(sum(d.spans for d in quiet), "span")
    return (
        f'<h3>Documents without findings</h3>\n<p class="meta">{count(len(quiet), "document")} '
        f"without a memorized span, a passage or a failed span: {tokens} as far as their spans reach, "
        f"{spans}{': ' + facts if facts else ''}.</p>\n{_closest_html(quiet)}\n{_ids_html(quiet)}"
    )


def documents_html(table: pa.Table, passages: pa.Table | None = None) -> str:
    """The documents with findings as a table (at most MAX_DOCUMENTS rows), the others summarized."""
    stats = _by_document(table, passages)
    if not stats:
        return '<p class="meta">No rows.</p>'
    quiet = {key: d for key, d in stats.items() if not d.has_findings}
    statuses = {s: 0 for s in STATUSES}
    for key, status in zip(document_keys(table), table["status"].to_pylist(), strict=True):
        if key in quiet:
            statuses[status] = statuses.get(status, 0) + 1
    found = [d for d in stats.values() if d.has_findings]
    return _findings_html(found) + "\n" + _quiet_html(list(quiet.values()), statuses)
