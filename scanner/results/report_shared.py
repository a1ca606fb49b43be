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
    """True for the passages marked shared text (False where the column is absent or null)."""
    if "shared_text" not in passages.column_names:
        return pa.array([False] * passages.num_rows)
    return pc.fill_null(passages["shared_text"], False)


def split(table: pa.Table, passages: pa.Table | None) -> tuple[pa.Table, pa.Table | None, list[dict]]:
    """(the results less the rows of shared-text passages, the books' own passages, the shared passages,
    each with `core`: the text of its span held by the most documents, what its copies have in common)."""
    if passages is None:
        return table, None, []
    mask = shared_mask(passages)
    shared = passages.filter(mask).to_pylist()
    spans = sorted({span for p in shared for span in p["span_ids"]})
    if not spans:
        return table, passages, []
    chosen = pc.is_in(table["span_id"], value_set=pa.array(spans, pa.string()))
    held = {
        r["span_id"]: r
        for r in table.filter(chosen).select(["span_id", "text", "copies_in_corpus"]).to_pylist()
    }
    for p in shared:
        mine = [held[s] for s in p["span_ids"] if s in held]
        p["core"] = max(mine, key=lambda r: r["copies_in_corpus"] or 0)["text"] if mine else p["text"]
    return table.filter(pc.invert(chosen)), passages.filter(pc.invert(mask)), shared


def groups(shared: list[dict]) -> list[tuple[str, int, list[dict]]]:
    """(text, documents holding it, its passages) per shared text (passages of one core: the header,
    whichever characters of each book its passage ran into), the most repeated first; the text shown is
    the group's shortest passage."""
    by_core: dict[str, list[dict]] = {}
    for p in shared:
        by_core.setdefault(p.get("core") or p["text"], []).append(p)
    out = [
        (min((p["text"] for p in ps), key=len), max(p["copies_in_corpus"] or 0 for p in ps), ps)
        for ps in by_core.values()
    ]
    return sorted(out, key=lambda g: (-g[1], g[0]))


def treatment(table: pa.Table, passages: pa.Table | None, left_out: bool) -> dict:
    """How the rows treated shared text, for denominators.json (an export's and a bundle's): the
    --shared-text-min-docs threshold passages.parquet used, the shared texts as the report groups them,
    their passages, spans and documents, and whether these rows leave them out (--without-shared-text).
    `passages` None: the run has no passages table (unfinished), so nothing was set apart."""
    if passages is None:
        return {
            "shared_text_min_docs": None,
            "texts": 0,
            "passages": 0,
            "spans": 0,
            "documents": 0,
            "left_out": left_out,
            "set_apart": False,
        }
    threshold = (passages.schema.metadata or {}).get(b"shared_text_min_docs")
    _, _, shared = split(table, passages)
    return {
        "shared_text_min_docs": int(threshold) if threshold else None,
        "texts": len(groups(shared)),
        "passages": len(shared),
        "spans": len({s for p in shared for s in p["span_ids"]}),
        "documents": len({p["doc_id"] for p in shared}),
        "left_out": left_out,
        "set_apart": True,
    }


def shared_spans(passages: pa.Table | None) -> list[str]:
    """The span_ids of the shared-text passages (what --without-shared-text leaves out)."""
    if passages is None:
        return []
    return sorted(
        {span for p in passages.filter(shared_mask(passages)).to_pylist() for span in p["span_ids"]}
    )


def shared_html(shared: list[dict], threshold: str | None) -> str:
    """Each shared text once, with how many documents hold it and how many of its passages the run found."""
    rule = f" (held by at least {_e(threshold)} documents)" if threshold else ""
    if not shared:
        return f'<p class="meta">No shared text{rule}: every memorized passage is its document\'s own.</p>'
    items = "".join(
        f"<li><b>text repeated in {_count(n, 'document')}</b> · {_count(len(ps), 'memorized passage')} found "
        f"<blockquote>{_e(text[:SHOWN_CHARS])}{'…' if len(text) > SHOWN_CHARS else ''}</blockquote></li>"
        for text, n, ps in groups(shared)
    )
    return (
        f'<p class="meta">Memorized text that many documents of the corpus hold{rule}: shown once here, '
        f"and not counted as findings of the documents below.</p><ul>{items}</ul>"
    )
