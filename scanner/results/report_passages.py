"""The report's memorized passages (RUN/passages.parquet): a strip per document showing where its passages
lie, and the passages themselves, highest ACR first. Each passage is listed once, however many windows
found it. Inline SVG, no script; every corpus string goes through html.escape (report.py's rule).
"""

from __future__ import annotations

import math

import pyarrow as pa

from scanner.results.html_format import esc, page_link, page_name, prompt_pre
from scanner.results.report_words import margin_facts

TOP_PASSAGES = 50
MAX_STRIPS = 200
STRIP_W, STRIP_H = 1000, 16
PASSAGE_COLOR, EXTENSION_COLOR, DOCUMENT_COLOR = "#d9480f", "#f5a97f", "#eaeef2"


def _e(value) -> str:
    return esc(value)


def _n(value) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    return f"{value:.4g}" if isinstance(value, float) else f"{value:,}"


def _key(row: dict) -> str:
    return row.get("doc_row") or row["doc_id"]


def document_lengths(results: pa.Table) -> dict[str, int]:
    """Characters of each document as far as its spans reach (the largest char_end), by doc_row."""
    keys = (
        results["doc_row"].to_pylist() if "doc_row" in results.column_names else results["doc_id"].to_pylist()
    )
    ids = results["doc_id"].to_pylist()
    lengths: dict[str, int] = {}
    for key, doc_id, end in zip(keys, ids, results["char_end"].to_pylist(), strict=True):
        key = key or doc_id
        lengths[key] = max(lengths.get(key, 0), end)
    return lengths


def _rect(start: int, end: int, length: int, color: str, title: str) -> str:
    x = start / length * STRIP_W
    width = max((end - start) / length * STRIP_W, 1.5)  # a short passage in a long book stays visible
    return (
        f'<rect x="{x:.1f}" y="0" width="{width:.1f}" height="{STRIP_H}" fill="{color}">'
        f"<title>{_e(title)}</title></rect>"
    )


def strip_svg(length: int, passages: list[dict]) -> str:
    """The document as a bar of `length` characters; passages dark, verified extensions lighter."""
    length = max([length, 1] + [p.get("extended_char_end") or p["char_end"] for p in passages])
    parts = [f'<rect x="0" y="0" width="{STRIP_W}" height="{STRIP_H}" fill="{DOCUMENT_COLOR}"/>']
    for p in passages:
        where = f"characters {p['char_start']:,}–{p['char_end']:,}"
        parts.append(
            _rect(
                p["char_start"],
                p["char_end"],
                length,
                PASSAGE_COLOR,
                f"passage {p['passage_id']}: {where}, {p['tokens']} tokens, ACR {_n(p['best_acr'])}",
            )
        )
        extended = p.get("extended_char_end")
        if extended is not None and extended > p["char_end"]:
            parts.append(
                _rect(
                    p["char_end"],
                    extended,
                    length,
                    EXTENSION_COLOR,
                    f"extension of {p['passage_id']}: +{p['extended_tokens']} tokens by generation",
                )
            )
    return (
        f'<svg class="strip" viewBox="0 0 {STRIP_W} {STRIP_H}" width="{STRIP_W}" height="{STRIP_H}" '
        f'preserveAspectRatio="none" role="img" xmlns="http://www.w3.org/2000/svg" '
        f'aria-label="Where the memorized passages lie in the document">{"".join(parts)}</svg>'
    )


def strips_html(passages: pa.Table, results: pa.Table) -> str:
    rows = passages.to_pylist()
    if not rows:
        return '<p class="meta">No memorized passage.</p>'
    lengths = document_lengths(results)
    by_doc: dict[str, list[dict]] = {}
    for row in rows:
        by_doc.setdefault(_key(row), []).append(row)
    ranked = sorted(by_doc.items(), key=lambda kv: -sum(p["tokens"] for p in kv[1]))
    shown = ranked[:MAX_STRIPS]
    items = "".join(
        f'<div class="strip-row"><p class="meta"><b>{_e(ps[0]["doc_id"])}</b> · '
        f"{_n(len(ps))} passage{'' if len(ps) == 1 else 's'}, {_n(sum(p['tokens'] for p in ps))} "
        f"tokens memorized, {_n(lengths.get(key, 0))} characters</p>{strip_svg(lengths.get(key, 0), ps)}</div>"
        for key, ps in shown
    )
    note = f"{_n(len(by_doc))} documents with memorized passages, most memorized tokens first" + (
        f"; the first {_n(len(shown))} shown" if len(shown) < len(by_doc) else ""
    )
    legend = (
        f'<span><i style="background:{PASSAGE_COLOR}"></i>memorized passage</span>'
        f'<span><i style="background:{EXTENSION_COLOR}"></i>extended by generation</span>'
    )
    return f'<p class="meta">{note}.</p>{items}<p class="legend">{legend}</p>'


def _extension_html(row: dict) -> str:
    if row.get("extended_tokens") is None:
        return '<p class="meta">Extension off (--extend-tokens 0).</p>'
    if not row["extended_tokens"]:
        return f'<p class="meta">Generation past the end reproduced nothing more (asked {_n(row["extend_budget"])} tokens).</p>'
    return (
        f"<h4>extension: +{_n(row['extended_tokens'])} tokens ({_n(row['extended_chars'])} characters) "
        f"verified by {_e(row['extension_engine'])} generation, its prompt"
        f"{_source(row.get('extension_prompt_source')) or ' (not measured)'}</h4>"
        f"<pre>{_e(row['extension_text'])}</pre>"
    )


def _passage_html(rank: int, row: dict, best: dict | None = None, pages: str | None = None) -> str:
    prompt = row["best_prompt"]
    prompt_html = (
        '<p class="meta">No prompt recorded.</p>'
        if prompt is None
        else '<p class="meta">Empty prompt: the fixed template alone elicits it.</p>'
        if prompt == ""
        else prompt_pre(prompt)
    )
    kind = f" ({_e(row['best_acr_kind'])})" if row.get("best_acr_kind") else ""
    return (
        f'<section class="span"><h3>#{rank} · ACR {_n(row["best_acr"])}{kind} · {_e(row["doc_id"])}</h3>'
        f'<p class="meta">characters {_n(row["char_start"])}–{_n(row["char_end"])}, tokens '
        f"{_n(row['token_start'])}–{_n(row['token_end'])} ({_n(row['tokens'])} tokens); {_n(row['spans'])} "
        f"memorized spans merged; best prompt {_n(row['best_prompt_tokens'])} tokens, span "
        f"<code>{_e(row['best_span_id'])}</code>; passage <code>{_e(row['passage_id'])}</code>; "
        f"{margin_facts(best or {})}</p>"
        f"{_predictable_html(row)}<h4>best prompt{_source(row.get('best_prompt_source'))}</h4>{prompt_html}"
        f"<h4>passage</h4><pre>{_e(row['text'])}</pre>"
        f"{_extension_html(row)}{page_link(pages, page_name(row['passage_id']))}</section>"
    )


SOURCE_LABELS = {"free": "free of the work's text", "work_text": "holds the work's text"}


def _source(source: str | None) -> str:
    return f" ({_e(SOURCE_LABELS.get(source, source))})" if source else ""


def _predictable_html(row: dict) -> str:
    # A passage none of whose spans survives calibration is text the model finds predictable, not recall.
    if row.get("calibrated_spans") is None or row["calibrated_spans"] > 0:
        return ""
    return (
        f'<p class="meta"><b>predictable</b> (not calibrated memorization): none of its {_n(row["spans"])} '
        "memorized spans survives calibration; their predictable_reason is in the results</p>"
    )


def passages_html(
    passages: pa.Table,
    limit: int = TOP_PASSAGES,
    best: dict[str, dict] | None = None,
    pages: str | None = None,
) -> str:
    """The passages, highest ACR first; `best`: each passage's best span row by page name (its margins),
    `pages`: the folder of the pages per passage, linked from each."""
    rows = sorted(
        passages.to_pylist(),
        key=lambda r: (-(r["best_acr"] if r["best_acr"] is not None else -1), -r["tokens"]),
    )
    if not rows:
        return '<p class="meta">No memorized passage.</p>'
    note = f"{_n(min(limit, len(rows)))} of {_n(len(rows))} memorized passages, highest ACR first."
    return f'<p class="meta">{note}</p>' + "\n".join(
        _passage_html(i, r, (best or {}).get(page_name(r["passage_id"])), pages)
        for i, r in enumerate(rows[:limit], 1)
    )


CSS = "svg.strip{display:block;width:100%;height:16px;border-radius:3px}.strip-row{margin:6px 0 10px}"
