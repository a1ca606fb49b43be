"""Memorized passages: the memorized spans of one document merged into maximal runs (pure, no torch).

Spans are fixed windows, so one memorized stretch of a book comes back as many overlapping rows. A
passage is a maximal run of memorized spans of one corpus row (doc_row) whose token ranges overlap or
touch (the next starts at or before the current run's end): readers ask "which passages can the model
reproduce", not "which windows". Invariants (tests/test_passages.py): passages of a document are
disjoint and not even adjacent; their token ranges cover exactly the union of the memorized spans; every
memorized span lies in exactly one passage and every token of a passage in one of its spans, so a span
that is not memorized lies inside a passage only where memorized spans around it cover it whole.

The extension by generation past a passage's end is the engine's part (stages/extend.py); here its
result is only folded into the rows.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass

log = logging.getLogger(__name__)

MEMORIZED = "memorized"


@dataclass(frozen=True, kw_only=True)
class Passage:
    """A merged run of memorized spans (`spans`: their result rows in token order) of one document."""

    key: str  # doc_row, or doc_id for tables written without doc_row
    doc_id: str
    doc_row: str | None
    token_start: int
    token_end: int
    char_start: int
    char_end: int
    spans: tuple[dict, ...]

    @property
    def span_ids(self) -> list[str]:
        return [s["span_id"] for s in self.spans]


def passage_id(doc_row: str, token_start: int, token_end: int, tokenizer_id: str) -> str:
    """First 16 hex digits of sha256 over (corpus row, token range, tokenizer id): the same passage of
    the same corpus and tokenizer gets the same id in every run, whichever spans found it."""
    key = json.dumps([doc_row, token_start, token_end, tokenizer_id], ensure_ascii=False)
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def document_key(row: dict) -> str:
    # doc_row keeps documents that share an id (--allow-duplicate-ids) apart; rows made by hand may lack it.
    return row.get("doc_row") or row["doc_id"]


def merge_runs(spans: list[dict]) -> list[list[dict]]:
    """Memorized spans of ONE document (any order) into maximal runs of overlapping or adjacent token
    ranges, in token order; within a run, spans are sorted by (token_start, token_end, span_id)."""
    ordered = sorted(spans, key=lambda s: (s["token_start"], s["token_end"], s["span_id"]))
    runs: list[list[dict]] = []
    end = -1
    for span in ordered:
        if runs and span["token_start"] <= end:
            runs[-1].append(span)
            end = max(end, span["token_end"])
        else:
            runs.append([span])
            end = span["token_end"]
    return runs


def find_passages(rows: Iterable[dict]) -> list[Passage]:
    """Passages of every document in a results table's rows, in order of each document's first row,
    then token order. Only `status == memorized` rows take part (the run's verdict at its τ)."""
    by_doc: dict[str, list[dict]] = {}
    for row in rows:
        if row["status"] == MEMORIZED:
            by_doc.setdefault(document_key(row), []).append(row)
    passages = []
    for key, spans in by_doc.items():
        for run in merge_runs(spans):
            passages.append(
                Passage(
                    key=key,
                    doc_id=run[0]["doc_id"],
                    doc_row=run[0].get("doc_row"),
                    token_start=run[0]["token_start"],
                    token_end=max(s["token_end"] for s in run),
                    char_start=min(s["char_start"] for s in run),
                    char_end=max(s["char_end"] for s in run),
                    spans=tuple(run),
                )
            )
    return passages


def stitched_text(passage: Passage) -> str | None:
    """The passage's text from its spans' own texts (document slices at their char offsets); None
    where the spans' characters leave a gap (a tokenizer whose offsets skip whitespace between tokens):
    then only the document can say what stands there."""
    out, end = [], passage.char_start
    for span in sorted(passage.spans, key=lambda s: s["char_start"]):
        if span["char_start"] > end:
            return None
        if span["char_end"] > end:
            out.append(span["text"][end - span["char_start"] :])
            end = span["char_end"]
    return "".join(out)


def best_span(passage: Passage) -> dict:
    """The span with the highest ACR (ties: the shortest prompt, then the earliest span): its prompt
    is the passage's evidence."""

    def key(span: dict):
        acr = span.get("acr")
        acr = acr if acr is not None and math.isfinite(acr) else -math.inf
        tokens = span.get("prompt_tokens")
        return (-acr, tokens if tokens is not None else math.inf, span["token_start"])

    return min(passage.spans, key=key)


def inside(passage: Passage, rows: Iterable[dict]) -> list[dict]:
    """Rows of the passage's document lying wholly inside its token range, memorized or not."""
    return [
        r
        for r in rows
        if document_key(r) == passage.key
        and r.get("target_tokens", 1)
        and passage.token_start <= r["token_start"]
        and r["token_end"] <= passage.token_end
    ]


def _calibrated(spans: tuple[dict, ...]) -> int | None:
    if any("calibrated_memorized" not in s for s in spans):
        return None  # rows written without calibrated_memorized (made by hand, or by another tool)
    return sum(bool(s["calibrated_memorized"]) for s in spans)


def _copies(passage: Passage) -> int | None:
    """How many documents hold most of the passage's text: over its characters, the median of the
    largest copies_in_corpus among the memorized spans covering each. A header merged with a few
    characters of the book's own text stays the header's count; a book's own passage that begins with
    the header takes its own."""
    counts = [s.get("copies_in_corpus") for s in passage.spans]
    if not counts or None in counts:
        return None  # rows written without it (made by hand)
    cover = [0] * max(passage.char_end - passage.char_start, 1)
    for span, count in zip(passage.spans, counts, strict=True):
        for i in range(
            max(span["char_start"], passage.char_start) - passage.char_start,
            min(span["char_end"], passage.char_end) - passage.char_start,
        ):
            cover[i] = max(cover[i], count)
    return sorted(cover)[len(cover) // 2]


def passage_row(passage: Passage, tokenizer_id: str, text: str | None, others: int) -> dict:
    """One row of the passages table (scanner/schema.py passages_schema), extension columns unset.
    `text`: the document slice, or None to stitch it from the spans; `others`: spans inside the
    passage that are not memorized."""
    best = best_span(passage)
    text = text if text is not None else stitched_text(passage)
    if text is None:
        raise ValueError(
            f"passage {passage.key} tokens {passage.token_start}-{passage.token_end}: the spans "
            "leave a gap in characters; pass the document text"
        )
    return {
        "passage_id": passage_id(passage.key, passage.token_start, passage.token_end, tokenizer_id),
        "doc_id": passage.doc_id,
        "doc_row": passage.doc_row,
        "char_start": passage.char_start,
        "char_end": passage.char_end,
        "token_start": passage.token_start,
        "token_end": passage.token_end,
        "tokens": passage.token_end - passage.token_start,
        "text": text,
        "best_acr": best.get("acr"),
        "best_acr_kind": best.get("acr_kind"),
        "best_prompt": best.get("prompt"),
        "best_prompt_tokens": best.get("prompt_tokens"),
        "best_span_id": best["span_id"],
        "span_ids": passage.span_ids,
        "spans": len(passage.spans),
        "other_spans_inside": others,
        "calibrated_spans": _calibrated(passage.spans),
        "best_prompt_source": best.get("prompt_source"),
        "copies_in_corpus": _copies(passage),
        "shared_text": None,
        **no_extension(),
    }


def no_extension(budget: int = 0) -> dict:
    """The extension columns of a passage whose extension did not run (budget 0: switched off)."""
    return {
        "extend_budget": budget,
        "extended_token_end": None,
        "extended_char_end": None,
        "extended_tokens": None,
        "extended_chars": None,
        "extension_text": None,
        "extension_prompt": None,
        "extension_span_id": None,
        "extension_engine": None,
        "extend_s": 0.0,
        "extension_prompt_source": None,
    }


def passage_rows(rows: list[dict], tokenizer_id: str, texts: dict[str, str] | None = None) -> list[dict]:
    """Passage rows of a results table's rows. `texts`: document text by document key (doc_row), used
    where given; else each passage's text is stitched from its spans."""
    texts = texts or {}
    by_doc: dict[str, list[dict]] = {}
    for row in rows:
        by_doc.setdefault(document_key(row), []).append(row)
    out = []
    for passage in find_passages(rows):
        doc = texts.get(passage.key)
        text = doc[passage.char_start : passage.char_end] if doc is not None else None
        others = sum(r["status"] != MEMORIZED for r in inside(passage, by_doc[passage.key]))
        out.append(passage_row(passage, tokenizer_id, text, others))
    return out


@dataclass(frozen=True)
class Extension:
    """The longest verified run of greedy generation from one of a passage's prompts."""

    token_end: int  # exclusive, in the document's tokens; never before the passage's end
    char_end: int
    text: str  # the document's text from the passage's char_end to char_end above
    prompt: str | None
    span_id: str | None
    engine: str
    seconds: float
    prompt_source: str | None = None  # of `prompt` (measures/overlap.py): work_text for a certificate


def with_extension(row: dict, extension: Extension, budget: int) -> dict:
    return {
        **row,
        "extend_budget": budget,
        "extended_token_end": extension.token_end,
        "extended_char_end": extension.char_end,
        "extended_tokens": extension.token_end - row["token_end"],
        "extended_chars": extension.char_end - row["char_end"],
        "extension_text": extension.text,
        "extension_prompt": extension.prompt,
        "extension_span_id": extension.span_id,
        "extension_engine": extension.engine,
        "extend_s": extension.seconds,
        "extension_prompt_source": extension.prompt_source,
    }


def verified_run(generated: list[int], document: list[int]) -> int:
    """Leading tokens of `generated` equal to `document` (both from the same start)."""
    n = 0
    for a, b in zip(generated, document, strict=False):
        if a != b:
            break
        n += 1
    return n
