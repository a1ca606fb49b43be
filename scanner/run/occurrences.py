"""A passage found once is found in every copy: the other places of the corpus where a memorized span's
text stands, whatever its offset, take its verdict without another search (phase 3, run/write.py).

A span's search depends only on its target tokens, so a place whose tokens are the same ids is the
same search: it gets a row of its own (a span at that offset, `searched_as` the span searched), or the
verdict on the row already there. The plans already share a verdict between spans of the same target
that the windows happened to cut alike (measures/budget.distinct); the windows of a copy at another
offset differ, so most copies were never matched. Here every screened document is searched for the
memorized texts (exact text, then exact token ids), once per run, in the driver; a document's own
repeats are left to its windows.
"""

from __future__ import annotations

import bisect
import json
import logging
from dataclasses import dataclass

from scanner.results.rows import base_row, copied_row
from scanner.stages.spans import Span, span_id, tokenize_document

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Found:
    """One more place of a memorized span's tokens: in document `doc` (a stages.read.Document) of `shard`."""

    rep: str  # span_id of the memorized span whose verdict it takes
    shard: int
    span: Span
    extra: str | None = None  # the document's other columns, as its screened rows hold them


def places(text: str, needle: str) -> list[int]:
    """Every character offset of `needle` in `text`, overlapping ones included."""
    out, at = [], text.find(needle)
    while at >= 0:
        out.append(at)
        at = text.find(needle, at + 1)
    return out


def _span_at(doc, ids: list[int], offsets: list, char: int, rep: dict, tokenizer_id: str) -> Span | None:
    """The span at character `char` of `doc` when its tokens there are the memorized span's ids."""
    starts = [start for start, _ in offsets]
    first = bisect.bisect_left(starts, char)
    n = len(rep["target_ids"])
    if first >= len(starts) or starts[first] != char or ids[first : first + n] != list(rep["target_ids"]):
        return None  # the text is there, but cut into other tokens: another search
    end = first + n
    return Span(
        doc_id=doc.doc_id,
        doc_row=doc.row,
        span_id=span_id(doc.row, doc.doc_id, first, n, tokenizer_id),
        token_start=first,
        token_end=end,
        char_start=char,
        char_end=offsets[end - 1][1],
        text=doc.text[char : offsets[end - 1][1]],
        target_ids=list(rep["target_ids"]),
    )


def find(docs, shard: int, memorized: list[dict], tokenizer, tokenizer_id: str) -> list[Found]:
    """Every place in `docs` (one shard's documents) holding a memorized row's exact text and tokens, in
    documents other than the row's own."""
    found = []
    for doc in docs:
        if not doc.text:
            continue
        # Other documents only: the places of one document are its own windows' (and the passage's
        # extension by generation reaches a repeat that follows it).
        hits = [
            (rep, char)
            for rep in memorized
            if rep["doc_row"] != doc.row
            for char in places(doc.text, rep["text"])
        ]
        if not hits:
            continue
        ids, offsets = tokenize_document(doc.text, tokenizer)
        extra = (
            json.dumps(doc.extra, ensure_ascii=False, default=str) if doc.extra else None
        )  # as screen_document
        for rep, char in hits:
            span = _span_at(doc, ids, offsets, char, rep, tokenizer_id)
            if span is not None:
                found.append(Found(rep["span_id"], shard, span, extra))
    return found


def apply(rows: dict, found: list[Found], verdicts: dict, tau: float) -> int:
    """`rows` ({span_id: row} of one shard) with every place found given its memorized span's verdict:
    a row already there that is not memorized takes it as a copy, a place without a row gets one.
    `verdicts`: {span_id: (its screen row, its final row)}. Returns how many rows took a verdict."""
    taken = 0
    for place in found:
        row = rows.get(place.span.span_id)
        if row is not None and (row["status"] == "memorized" or row["span_id"] == place.rep):
            continue
        if row is None:
            row = {
                **base_row(place.span, place.shard, tau, place.extra),
                "status": "not_searched",
                "reason": "a copy of a memorized span found by its text",
            }
        rows[place.span.span_id] = copied_row(row, *verdicts[place.rep])
        taken += 1
    return taken
