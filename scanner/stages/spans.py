"""Spans stage: tokenize a document once and window its token ids into targets.

A span keeps both coordinates: token offsets (what the model is asked to produce) and character offsets
(where it stands in the document), and its text is the document slice itself, never a decode, so an
exported span can be found verbatim in the source. Documents that cannot yield a target still yield one
span with a skip reason, so every document is accounted for in the results.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass

from scanner.config import SpanConfig
from scanner.errors import InputError
from scanner.stages.read import Document

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Span:
    doc_id: str
    doc_row: str = ""
    span_id: str
    token_start: int
    token_end: int
    char_start: int
    char_end: int
    text: str
    target_ids: list[int]
    skip_reason: str | None = None
    anchored: bool = False  # placed on a run of greedy matches (stages/anchor.py), not a fixed window

    @property
    def skipped(self) -> bool:
        return self.skip_reason is not None


def span_id(doc_row: str, doc_id: str, token_start: int, tokens: int, tokenizer_id: str) -> str:
    """First 16 hex digits of sha256 over (corpus row, doc_id, token_start, token count, tokenizer id).

    The corpus row ('<file>:<row>') makes it unique per row even where ids repeat: keyed by doc_id
    alone, two documents sharing an id shared span ids, and one document's rows (and evidence) were
    written under the other's. JSON keeps the fields apart, so no two different tuples hash the same
    text ("a1", 2 vs "a", 12)."""
    key = json.dumps([doc_row, doc_id, token_start, tokens, tokenizer_id], ensure_ascii=False)
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def tokenize_document(text: str, tokenizer) -> tuple[list[int], list[tuple[int, int]]]:
    """The whole document's token ids (no special tokens) and each token's character range in `text`.

    A later stage takes a span's preceding context from the same ids, so that context and target are
    cut from one tokenization rather than re-tokenized pieces."""
    try:
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
    except NotImplementedError as err:
        raise InputError(
            f"tokenizer {type(tokenizer).__name__} gives no character offsets (a slow, "
            "Python tokenizer); load the model's fast tokenizer (tokenizer.json)"
        ) from err
    return list(enc["input_ids"]), [(int(a), int(b)) for a, b in enc["offset_mapping"]]


def windows(num_tokens: int, config: SpanConfig) -> list[tuple[int, int]]:
    """(start, end) token windows. Stops after the first window that reaches the end: with a stride
    shorter than the span, later tail windows would lie inside it and add nothing new."""
    out = []
    for start in range(0, num_tokens, config.step):
        end = min(start + config.span_tokens, num_tokens)
        if end - start >= config.minimum:
            out.append((start, end))
        if end == num_tokens:
            break
    return out


def _skipped(
    doc: Document, reason: str, tokenizer_id: str, tokens: int = 0, chars: tuple[int, int] = (0, 0)
) -> Span:
    text = doc.text[chars[0] : chars[1]] if doc.text is not None else ""
    return Span(
        doc_id=doc.doc_id,
        doc_row=doc.row,
        span_id=span_id(doc.row, doc.doc_id, 0, tokens, tokenizer_id),
        token_start=0,
        token_end=tokens,
        char_start=chars[0],
        char_end=chars[1],
        text=text,
        target_ids=[],
        skip_reason=reason,
    )


def make_spans(
    doc: Document,
    tokenizer,
    config: SpanConfig,
    tokenizer_id: str,
    tokens: tuple[list[int], list[tuple[int, int]]] | None = None,
) -> list[Span]:
    """The document's spans in order; exactly one skipped span when it has no usable target.

    `tokens`: the document's (ids, offsets) when the caller already tokenized it (the screen needs
    them too), so a document is tokenized once."""
    if doc.problem is not None:
        return [_skipped(doc, doc.problem, tokenizer_id)]
    if doc.text is None:
        return [_skipped(doc, "null text", tokenizer_id)]
    if not doc.text.strip():
        return [_skipped(doc, "empty text", tokenizer_id)]
    ids, offsets = tokens or tokenize_document(doc.text, tokenizer)
    if len(ids) < config.minimum:
        # The whole (short) document is still shown, so a reader sees what was skipped.
        chars = (offsets[0][0], offsets[-1][1]) if ids else (0, 0)
        return [
            _skipped(
                doc,
                f"too short: {len(ids)} tokens < {config.minimum}",
                tokenizer_id,
                tokens=len(ids),
                chars=chars,
            )
        ]
    spans = []
    for start, end in windows(len(ids), config):
        char_start, char_end = offsets[start][0], offsets[end - 1][1]
        spans.append(
            Span(
                doc_id=doc.doc_id,
                doc_row=doc.row,
                span_id=span_id(doc.row, doc.doc_id, start, end - start, tokenizer_id),
                token_start=start,
                token_end=end,
                char_start=char_start,
                char_end=char_end,
                text=doc.text[char_start:char_end],
                target_ids=ids[start:end],
            )
        )
    log.debug("document %s: %d tokens, %d spans", doc.doc_id, len(ids), len(spans))
    return spans
