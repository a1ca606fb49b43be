"""One self-contained HTML page about a scan: run summary, ACR histogram, a table row per document with a
finding and one summary of the documents without (report_documents.py says what a finding is), the
memorized passages with a strip per document that has one (report_passages.py; top flagged spans for runs
without passages). The page grows with the findings, not with the number of documents.

The page has inline CSS and an inline SVG plot and needs no JavaScript or network, so it can be mailed or
attached to a filing as one file. Corpus text, prompts and document ids are untrusted input: every one goes
through html.escape, so a document holding markup shows as text and never runs.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from scanner.errors import require
from scanner.measures import calibration as calibrate
from scanner.results import report_documents, report_pages, report_passages, report_recall, report_shared
from scanner.results.denominators import denominators
from scanner.results.export import check_columns
from scanner.results.html_format import count as _count
from scanner.results.html_format import esc as _e
from scanner.results.html_format import href, page_link, page_name, prompt_pre, status_facts
from scanner.results.html_format import num as _num
from scanner.results.report_words import denominators_html, margin_facts
from scanner.schema import STATUSES
from scanner.storage.atomic import atomic_write_bytes

log = logging.getLogger(__name__)

SEARCHED = report_documents.SEARCHED
TAU_LINE = 1.0  # the paper's threshold; drawn even when a run used another main τ, as the reference
TOP_SPANS = 50
MAX_BINS = 40
NEEDED = (
    "doc_id",
    "span_id",
    "char_start",
    "char_end",
    "token_start",
    "token_end",
    "text",
    "status",
    "acr",
    "prompt",
    "prompt_tokens",
    "target_tokens",
    "verify_engine",
    "min_margin",
)


@dataclass(frozen=True)
class Histogram:
    edges: list[float]  # len(bins) + 1, from 0
    memorized: list[int]
    not_memorized: list[int]


def _nice_step(span: float, max_steps: int) -> float:
    # The smallest of 1, 2, 2.5, 5 times a power of ten that cuts `span` into at most `max_steps` pieces;
    # these steps put τ = 1 on a bin edge whenever the bins are narrower than 1.
    power = 10.0 ** math.floor(math.log10(span / max_steps))
    return next(m * power for m in (1, 2, 2.5, 5, 10) if span / (m * power) <= max_steps)


def histogram(values: Iterable[tuple[float, bool]], max_bins: int = MAX_BINS) -> Histogram | None:
    """Bins from 0 over (acr, memorized) pairs, at least up to 2 so τ = 1 is never at the edge; None when
    there is no finite value."""
    pairs = [(max(v, 0.0), m) for v, m in values if v is not None and math.isfinite(v)]
    if not pairs:
        return None
    top = max(2.0, max(v for v, _ in pairs))
    step = _nice_step(top, max_bins)
    bins = max(1, math.ceil(top / step - 1e-9))
    counts = {True: [0] * bins, False: [0] * bins}
    for value, memorized in pairs:
        # The epsilon keeps 0.3 / 0.1 = 2.999… in the bin that starts at 0.3.
        counts[memorized][min(int(value / step + 1e-9), bins - 1)] += 1
    return Histogram(
        edges=[i * step for i in range(bins + 1)], memorized=counts[True], not_memorized=counts[False]
    )


def _value(value) -> str:
    """A summary value as escaped HTML; mappings and lists flattened to one line."""
    if isinstance(value, dict):
        return ", ".join(f"{_e(k)}: {_value(v)}" for k, v in value.items()) or "–"
    if isinstance(value, list | tuple):
        return ", ".join(_value(v) for v in value) or "–"
    return _e(_num(value))


def _status_counts(table: pa.Table) -> dict[str, int]:
    counts = {s: 0 for s in STATUSES}
    for item in pc.value_counts(table["status"]).to_pylist():
        counts[item["values"]] = item["counts"]
    return counts


def _denominators_html(table: pa.Table) -> str:
    return denominators_html(denominators(table))


def _summary_html(table: pa.Table, summary: dict) -> str:
    facts = status_facts(_status_counts(table))
    docs = len(set(report_documents.document_keys(table)))
    items = "".join(f"<dt>{_e(k)}</dt><dd>{_value(v)}</dd>" for k, v in summary.items())
    listing = f'<dl class="summary">{items}</dl>' if items else '<p class="meta">No run summary given.</p>'
    return (
        f'<p class="facts">This table: {_count(table.num_rows, "span")} in {_count(docs, "document")}'
        f"{': ' + facts if facts else ''}.{_skipped_html(table)}</p>\n<h2>Run</h2>\n{listing}"
    )


def _skipped_html(table: pa.Table) -> str:
    """Why spans were skipped, by reason (a bare "1 skipped" leaves a reader guessing)."""
    if "reason" not in table.column_names:
        return ""
    cols = table.select(["status", "reason"]).to_pydict()
    why = Counter(
        r or "no reason given" for s, r in zip(cols["status"], cols["reason"], strict=True) if s == "skipped"
    )
    return (" Skipped: " + "; ".join(f"{_e(r)} ({n})" for r, n in why.most_common()) + ".") if why else ""


SVG_W, SVG_H, LEFT, RIGHT, TOP, BOTTOM = 1000, 280, 52, 16, 24, 42
COLORS = {"memorized": "#d9480f", "not_memorized": "#8fa3bf"}


def _x(value: float, top: float) -> float:
    return LEFT + value / top * (SVG_W - LEFT - RIGHT)


def _y(count: float, ymax: float) -> float:
    return SVG_H - BOTTOM - count / ymax * (SVG_H - TOP - BOTTOM)


def _bars(h: Histogram, ymax: float) -> list[str]:
    top, out = h.edges[-1], []
    for i, (lo, hi) in enumerate(zip(h.edges, h.edges[1:], strict=False)):
        x, width = _x(lo, top) + 0.5, max(_x(hi, top) - _x(lo, top) - 1, 0.5)
        base = 0
        for status, n in (("not_memorized", h.not_memorized[i]), ("memorized", h.memorized[i])):
            if n:
                y0, y1 = _y(base, ymax), _y(base + n, ymax)
                out.append(
                    f'<rect x="{x:.1f}" y="{y1:.1f}" width="{width:.1f}" height="{y0 - y1:.1f}" '
                    f'fill="{COLORS[status]}"><title>ACR {lo:g}–{hi:g}: {n} '
                    f"{status.replace('_', ' ')}</title></rect>"
                )
            base += n
    return out


def _axes(h: Histogram, ymax: int) -> list[str]:
    top, bottom = h.edges[-1], SVG_H - BOTTOM
    out = [f'<line x1="{LEFT}" y1="{bottom}" x2="{SVG_W - RIGHT}" y2="{bottom}" class="axis"/>']
    for count in sorted({0, ymax // 2, ymax}):
        y = _y(count, ymax)
        out.append(
            f'<line x1="{LEFT}" y1="{y:.1f}" x2="{SVG_W - RIGHT}" y2="{y:.1f}" class="grid"/>'
            f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{count}</text>'
        )
    step = _nice_step(top, 10)
    for i in range(int(top / step + 1e-9) + 1):
        x = _x(i * step, top)
        out.append(
            f'<line x1="{x:.1f}" y1="{bottom}" x2="{x:.1f}" y2="{bottom + 4}" class="axis"/>'
            f'<text x="{x:.1f}" y="{bottom + 17}" text-anchor="middle">{i * step:g}</text>'
        )
    tau = _x(TAU_LINE, top)
    out.append(
        f'<line x1="{tau:.1f}" y1="{TOP - 6}" x2="{tau:.1f}" y2="{bottom}" class="tau"/>'
        f'<text x="{tau + 4:.1f}" y="{TOP + 2}" class="tau-label">τ = {TAU_LINE:g}</text>'
    )
    out.append(
        f'<text x="{(LEFT + SVG_W - RIGHT) / 2}" y="{SVG_H - 6}" text-anchor="middle">ACR</text>'
        f'<text transform="translate(14 {(TOP + bottom) / 2}) rotate(-90)" '
        'text-anchor="middle">spans</text>'
    )
    return out


def _histogram_html(table: pa.Table) -> str:
    cols = table.select(["status", "acr"]).to_pydict()
    h = histogram(
        (a, s == "memorized") for s, a in zip(cols["status"], cols["acr"], strict=True) if s in SEARCHED
    )
    if h is None:
        return '<p class="meta">No decided spans (memorized or not memorized) to plot.</p>'
    peak = max(m + n for m, n in zip(h.memorized, h.not_memorized, strict=True))
    ymax = max(2, peak + peak % 2)  # even, so the middle grid line has a whole count
    parts = _bars(h, ymax) + _axes(h, ymax)
    legend = "".join(
        f'<span><i style="background:{c}"></i>{s.replace("_", " ")}</span>' for s, c in COLORS.items()
    )
    return (
        f'<svg class="hist" viewBox="0 0 {SVG_W} {SVG_H}" width="{SVG_W}" height="{SVG_H}" role="img" '
        f'aria-label="Histogram of ACR over decided spans" xmlns="http://www.w3.org/2000/svg">'
        f'<title>ACR of decided spans</title>{"".join(parts)}</svg>\n<p class="legend">{legend}</p>'
    )


def top_spans(table: pa.Table, limit: int = TOP_SPANS) -> list[dict]:
    """Memorized spans, highest ACR first (ties in table order), at most `limit`."""
    optional = (
        "predictable",
        "predictable_reason",
        "prompt_source",
        "prompt_doc_run_tokens",
        "attempts",
        "generation_margin",
        "generation_margin_at",
        "fragile_below",
        "fragile",
    )
    shown = list(NEEDED) + [c for c in optional if c in table.column_names]
    flagged = table.filter(pc.equal(table["status"], "memorized")).select(shown)
    order = pc.sort_indices(flagged, sort_keys=[("acr", "descending")])  # nulls last by default
    return flagged.take(order[:limit]).to_pylist()


def _prompt_html(row: dict) -> str:
    if row["prompt"] is None:
        return '<p class="meta">No prompt recorded.</p>'
    if row["prompt"] == "":
        return '<p class="meta">Empty prompt: the fixed template alone elicits the span.</p>'
    return prompt_pre(row["prompt"])


def _calibration_html(table: pa.Table) -> str:
    """The paper's verdict and the calibrated one side by side (scanner/measures/calibration.py)."""
    if "calibrated_memorized" not in table.column_names:
        return '<p class="meta">This table has no calibrated verdicts (no calibrated_memorized column).</p>'
    c = calibrate.counts(table.select(["memorized", "calibrated_memorized", "predictable"]).to_pylist())
    items = (
        ("memorized (ACR &gt; τ, the paper's verdict)", c["memorized"]),
        ("calibrated memorized (memorized and not predictable)", c["calibrated_memorized"]),
        ("memorized but predictable", c["predictable"]),
    )
    return '<dl class="summary">' + "".join(f"<dt>{k}</dt><dd>{_num(v)}</dd>" for k, v in items) + "</dl>"


def _predictable_html(row: dict) -> str:
    if not row.get("predictable"):
        return ""
    return f'<p class="meta"><b>predictable</b> (not calibrated memorization): {_e(row["predictable_reason"])}</p>'


SOURCE_LABELS = report_passages.SOURCE_LABELS


def source_html(source: str | None, run_tokens: int | None = None) -> str:
    """Whose words the prompt holds (prompt_source), for the prompt's heading."""
    if source is None:
        return ""
    run = (
        f", longest run shared with the document {_num(run_tokens)} tokens" if run_tokens is not None else ""
    )
    return f" ({_e(SOURCE_LABELS.get(source, source))}{run})"


def _attempts_html(row: dict) -> str:
    attempts = row.get("attempts")
    if not attempts:
        return ""
    failed = sum(a["outcome"] != "success" for a in attempts)
    return f"; {_num(len(attempts))} attempts ({_num(failed)} without success)"


def _span_html(rank: int, row: dict, pages: str | None = None) -> str:
    engine = f", verified by {_e(row['verify_engine'])}" if row["verify_engine"] else ""
    margin = f", min margin {_num(row['min_margin'])}" if row["min_margin"] is not None else ""
    margin += f"; {margin_facts(row)}"
    return (
        f'<section class="span"><h3>#{rank} · ACR {_num(row["acr"])} · {_e(row["doc_id"])}</h3>'
        f'<p class="meta">characters {_num(row["char_start"])}–{_num(row["char_end"])}, tokens '
        f"{_num(row['token_start'])}–{_num(row['token_end'])}; prompt {_num(row['prompt_tokens'])} "
        f"tokens for {_num(row['target_tokens'])} target tokens{engine}{margin}{_attempts_html(row)}; span "
        f"<code>{_e(row['span_id'])}</code></p>{_predictable_html(row)}"
        f"<h4>prompt{source_html(row.get('prompt_source'), row.get('prompt_doc_run_tokens'))}</h4>{_prompt_html(row)}"
        f"<h4>text</h4><pre>{_e(row['text'])}</pre>{page_link(pages, page_name('span-' + row['span_id']))}</section>"
    )


def _spans_html(table: pa.Table, pages: str | None = None) -> str:
    rows = top_spans(table)
    if not rows:
        return '<p class="meta">No span was flagged as memorized.</p>'
    total = pc.sum(pc.equal(table["status"], "memorized")).as_py() or 0
    note = f"{_num(len(rows))} of {_num(total)} memorized spans, highest ACR first."
    return f'<p class="meta">{note}</p>' + "\n".join(_span_html(i, r, pages) for i, r in enumerate(rows, 1))


CSS = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1f2328;max-width:1100px;
 margin:24px auto;padding:0 20px;background:#fff}
h1{font-size:1.6em;margin:0 0 4px}h2{font-size:1.2em;border-bottom:1px solid #d0d7de;padding-bottom:4px;
 margin-top:32px}h3{font-size:1em;margin:0 0 2px;overflow-wrap:anywhere}h4{font-size:.85em;margin:8px 0 0;
 color:#57606a;text-transform:uppercase;letter-spacing:.04em}
.facts,.meta{color:#57606a}.meta{font-size:13px;margin:4px 0}
dl.summary{display:grid;grid-template-columns:max-content 1fr;gap:4px 18px}dt{font-weight:600}dd{margin:0;
 overflow-wrap:anywhere}
table{border-collapse:collapse;width:100%;font-size:14px}th,td{border-bottom:1px solid #e5e7eb;
 padding:4px 8px;text-align:left;vertical-align:top}th{background:#f6f8fa}
.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}td.doc{overflow-wrap:anywhere}
.track{display:inline-block;width:70px;height:8px;background:#eaeef2;border-radius:4px;margin-left:6px;
 vertical-align:middle;overflow:hidden}.fill{display:block;height:100%;background:#d9480f}
svg.hist{max-width:100%;height:auto;font:12px system-ui,sans-serif;fill:#57606a}
svg .axis{stroke:#57606a}svg .grid{stroke:#eaeef2}svg .tau{stroke:#1f2328;stroke-dasharray:5 4}
svg .tau-label{fill:#1f2328;font-weight:600}
.legend span{margin-right:16px;font-size:13px}.legend i{display:inline-block;width:10px;height:10px;
 margin-right:5px;border-radius:2px}
.span{border:1px solid #d0d7de;border-radius:8px;padding:10px 14px;margin:12px 0}
pre{white-space:pre-wrap;overflow-wrap:anywhere;background:#f6f8fa;border:1px solid #d0d7de;border-radius:6px;
 padding:8px 10px;margin:4px 0;max-height:18em;overflow:auto;font:13px/1.4 ui-monospace,Menlo,Consolas,monospace}
code{font:12px ui-monospace,Menlo,Consolas,monospace}
"""


def _all_pages_html(finds: list, pages: str | None, shown: int) -> str:
    """Every page linked, where the sections above show only the first `shown` findings."""
    if pages is None or len(finds) <= shown:
        return ""
    items = "".join(
        f'<li><a href="{href(pages, f.page + ".html")}">{_e(f.where["doc_id"])} · ACR '
        f"{_num(f.where.get('best_acr', f.span.get('acr')))}</a></li>"
        for f in finds
    )
    return (
        f'<details class="quiet"><summary>All {_count(len(finds), "page")}, one per finding, highest ACR '
        f'first</summary><ol class="ids">{items}</ol></details>'
    )


def _flagged_html(table: pa.Table, passages: pa.Table | None, pages: str | None = None) -> str:
    """Memorized passages (each once, however many windows found it) where the run has them; the top
    flagged spans where it has no passages table yet (an unfinished scan). `pages`: the folder of the
    pages per finding (report_pages.py), linked from each; None where none were written."""
    finds = report_pages.findings(table, passages)
    if passages is None:
        return f'<h2 id="passages">Top flagged spans</h2>\n{_spans_html(table, pages)}\n' + _all_pages_html(
            finds, pages, TOP_SPANS
        )
    best = {f.page: f.span for f in finds}
    return (
        f"<h2>Where the memorized passages lie</h2>\n{report_passages.strips_html(passages, table)}\n"
        f'<h2 id="passages">Memorized passages</h2>\n{report_passages.passages_html(passages, best=best, pages=pages)}\n'
        + _all_pages_html(finds, pages, report_passages.TOP_PASSAGES)
    )


def render_report(
    table: pa.Table,
    summary: dict,
    passages: pa.Table | None = None,
    pages: str | None = None,
    recall: dict | None = None,
) -> str:
    """The whole page. `summary` is shown as given (any keys; nested dicts and lists on one line);
    `passages`: the run's passages table (passages.parquet), listed instead of single spans; `pages`: the
    folder (relative to the report) of the pages per finding, linked from each; `recall`: the run's
    recall.json (what the unsearched still hold, estimated by the recall audit)."""
    check_columns(table, NEEDED)
    model = summary.get("model")
    title = f"ACR scan report · {model}" if model else "ACR scan report"
    own, own_passages, shared = report_shared.split(table, passages)
    threshold = (
        (passages.schema.metadata or {}).get(b"shared_text_min_docs", b"").decode() if passages else None
    )
    body = (
        f"<h1>{_e(title)}</h1>\n{_summary_html(table, summary)}\n"
        f"<h2>What the hits were drawn from</h2>\n{_denominators_html(table)}\n"
        f'<h2 id="recall">What the search left unsearched</h2>\n{report_recall.recall_html(recall)}\n'
        f"<h2>Memorized or predictable</h2>\n{_calibration_html(table)}\n"
        f"<h2>ACR of decided spans (certified or searched)</h2>\n{_histogram_html(table)}\n"
        + (
            f'<h2 id="shared">Shared text</h2>\n{report_shared.shared_html(shared, threshold)}\n'
            if passages
            else ""
        )
        + f"<h2>Documents</h2>\n{report_documents.documents_html(own, own_passages)}\n"
        + _flagged_html(own, own_passages, pages)
    )
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)}</title><style>{CSS}{report_documents.CSS}{report_passages.CSS}{report_recall.CSS}</style>"
        f"</head>\n<body>\n{body}"
        "</body></html>\n"
    )


def write_report(
    table: pa.Table,
    summary: dict,
    out: str | Path,
    passages: pa.Table | None = None,
    surroundings: dict[str, dict] | None = None,
    work_text_tokens: int | None = None,
    recall: dict | None = None,
) -> Path:
    """Render and write the page and a page per finding beside it (`surroundings`: the book's text around
    each, stages/surroundings.py, by page). The pages go to a temporary folder first, then the report,
    atomically, then the folder takes the place of the old one: a failed write leaves no half report and
    no stray folder. Returns the report's path."""
    out = Path(out)
    require(
        not out.is_dir(),
        f"--out {out} is a folder; name the HTML file to write, e.g. --out {out / 'report.html'}",
    )
    finds = report_pages.findings(*report_shared.split(table, passages)[:2])  # shared text has no page
    folder = report_pages.pages_folder(out) if finds else None
    page = render_report(table, summary, passages, folder, recall)
    out.parent.mkdir(parents=True, exist_ok=True)
    counts = denominators(table)
    pages = (
        (
            f.page,
            report_pages.page_html(
                f, (surroundings or {}).get(f.page), counts, out.name, summary.get("model"), work_text_tokens
            ),
        )
        for f in finds
    )
    report_pages.write_pages(
        out.parent / report_pages.pages_folder(out),
        pages,
        lambda: atomic_write_bytes(out, page.encode("utf-8")),
    )
    log.info("wrote report of %d rows and %d pages to %s", table.num_rows, len(finds), out)
    return out
