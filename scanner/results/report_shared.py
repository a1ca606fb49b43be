"""Shared text apart: a text many documents of the corpus hold (a publisher's header, a licence, a table
of contents) is memorized because it is repeated, and says nothing about which books the model holds. The
passages table marks it (shared_text, scanner/run/passages.py); the report shows each such text once, as
"text repeated in N documents", and counts per book only the book's own passages."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from scanner.results.html_format import count as _count
from scanner.results.html_format import esc as _e

SHOWN_CHARS = 300  # of each shared text on the page


def shared_mask(passages: pa.Table) -> pa.ChunkedArray | pa.Array:
    """True for the passages marked shared text (False where the column is absent or null: older runs)."""
    if "shared_text" not in passages.column_names:
        return pa.array([False] * passages.num_rows)
    return pc.fill_null(passages["shared_text"], False)


def split(table: pa.Table, passages: pa.Table | None) -> tuple[pa.Table, pa.Table | None, list[dict]]:
    """(the results less the rows of shared-text passages, the books' own passages, the shared passages)."""
    if passages is None:
        return table, None, []
    mask = shared_mask(passages)
    shared = passages.filter(mask).to_pylist()
    spans = sorted({span for p in shared for span in p["span_ids"]})
    if spans:
        table = table.filter(pc.invert(pc.is_in(table["span_id"], value_set=pa.array(spans, pa.string()))))
    return table, passages.filter(pc.invert(mask)), shared


def groups(shared: list[dict]) -> list[tuple[str, int, list[dict]]]:
    """(text, documents holding it, its passages) per distinct shared text, the most repeated first."""
    by_text: dict[str, list[dict]] = {}
    for p in shared:
        by_text.setdefault(p["text"], []).append(p)
    out = [(text, max(p["copies_in_corpus"] or 0 for p in ps), ps) for text, ps in by_text.items()]
    return sorted(out, key=lambda g: (-g[1], g[0]))


def shared_html(shared: list[dict], threshold: str | None) -> str:
    """Each shared text once, with how many documents hold it and how many of its passages the run found."""
    rule = f" (held by at least {_e(threshold)} documents)" if threshold else ""
    if not shared:
        return f'<p class="meta">No shared text{rule}: every memorized passage is its document\'s own.</p>'
    items = "".join(
        f"<li><b>text repeated in {_count(n, 'document')}</b> · {_count(len(ps), 'memorized passage')} found "
        f"<blockquote>{_e(text[:SHOWN_CHARS])}{'…' if len(text) > SHOWN_CHARS else ''}</blockquote></li>"
        for text, n, ps in groups(shared))
    return (f'<p class="meta">Memorized text that many documents of the corpus hold{rule}: shown once here, '
            f"and not counted as findings of the documents below.</p><ul>{items}</ul>")
