"""Anchored spans: where the screen's window rows say memorized text sits, spans aligned to it.

Fixed windows (span L, stride L) miss a memorized passage one span long at a random offset: it lies
across two windows that each hold unmemorized text too, so neither is generated whole from any prompt.
The window rows already give, for every token the windows cover, whether the teacher-forced argmax is
the document's token. Memorized text is a run of such matches (its first token, cued by text the model
never saw next to it, is usually a miss). Each run long enough gets spans of length L placed
- at its start: at its first match and one token before it (the passage's first token, uncued), and
- at its end, ending at its last match, when the run reaches past a span,
screened like every other span (window, span and certificate rows), with span ids of their own. A
window that already starts there with the same length is not repeated.
"""

from __future__ import annotations

import logging
import time

from scanner.config import ScreenConfig, SpanConfig
from scanner.engine.hf import HFEngine
from scanner.stages.read import Document
from scanner.stages.screen import Screened, ScreenWork, screen_spans
from scanner.stages.spans import Span, span_id
from scanner.stages.stream import DocumentStream, chunk_tokens

log = logging.getLogger(__name__)

LEAD = 1  # tokens before a run's first match that belong to the passage: its uncued first token


def token_matches(num_tokens: int, spans: list[Span], screened: list[Screened]) -> list[bool]:
    """Per document token: a window row matched it (overlapping windows: any of them did)."""
    matched = [False] * num_tokens
    for span, result in zip(spans, screened, strict=True):
        for offset, hit in enumerate(result.window_matches):
            matched[span.token_start + offset] |= hit
    return matched


def match_runs(matched: list[bool], min_run: int, max_gap: int) -> list[tuple[int, int]]:
    """Maximal runs [first match, last match + 1) in which at most `max_gap` consecutive misses are
    bridged, holding at least `min_run` matches."""
    runs, start, last, count = [], None, -1, 0
    for i, hit in enumerate([*matched, *[False] * (max_gap + 1)]):  # the padding closes a final run
        if hit:
            if start is None:
                start, count = i, 0
            last, count = i, count + 1
        elif start is not None and i - last > max_gap:
            if count >= min_run:
                runs.append((start, last + 1))
            start = None
    return runs


def anchor_starts(matched: list[bool], span_tokens: int, config: SpanConfig) -> list[int]:
    """Start tokens of the anchored spans (sorted, distinct, each a whole span inside the document)."""
    last = len(matched) - span_tokens
    starts = set()
    for start, end in match_runs(matched, config.min_run, config.anchor_max_gap):
        # Its first token is a miss when its context never preceded it in training, a match when the
        # text before cues it (a line break before a passage that often follows one): a span at each.
        starts.update({max(start - LEAD, 0), start})
        if end - span_tokens > start:  # the run reaches past one span: a span that ends with it
            starts.add(end - span_tokens)
    return sorted({min(s, last) for s in starts}) if last >= 0 else []


def anchored_spans(
    doc: Document,
    ids: list[int],
    offsets: list[tuple[int, int]],
    spans: list[Span],
    screened: list[Screened],
    config: SpanConfig,
    tokenizer_id: str,
) -> list[Span]:
    """The document's anchored spans, none starting where a window of the same length does."""
    length = config.span_tokens
    taken = {s.token_start for s in spans if s.token_end - s.token_start == length}
    out = []
    for start in anchor_starts(token_matches(len(ids), spans, screened), length, config):
        if start in taken:
            continue
        end = start + length
        a, b = offsets[start][0], offsets[end - 1][1]
        out.append(
            Span(
                doc_id=doc.doc_id,
                doc_row=doc.row,
                span_id=span_id(doc.row, doc.doc_id, start, length, tokenizer_id),
                token_start=start,
                token_end=end,
                char_start=a,
                char_end=b,
                text=doc.text[a:b],
                target_ids=ids[start:end],
                anchored=True,
            )
        )
        taken.add(start)
    return out


def _screen(
    engine: HFEngine,
    ids: list[int],
    spans: list[Span],
    config: ScreenConfig,
    work: ScreenWork | None,
    stream: DocumentStream,
) -> dict[str, tuple[Screened, float]]:
    """Screened result and its share of the seconds, by span_id (one batched screen per span length)."""
    out = {}
    for length in sorted({len(s.target_ids) for s in spans}):
        group = [s for s in spans if len(s.target_ids) == length]
        start = time.perf_counter()
        results = screen_spans(engine, ids, group, config, work, stream)
        each = (time.perf_counter() - start) / len(group)
        out.update({s.span_id: (r, each) for s, r in zip(group, results, strict=True)})
    return out


def screen_with_anchors(
    engine: HFEngine,
    doc: Document,
    tokens: tuple[list[int], list[tuple[int, int]]],
    spans: list[Span],
    spans_config: SpanConfig,
    screen_config: ScreenConfig,
    tokenizer_id: str,
    work: ScreenWork | None = None,
) -> list[tuple[Span, Screened, float]]:
    """The document's live spans screened, then its anchored spans screened: (span, result, seconds)
    for all of them in document order; what the screen forwarded is added to `work` when given."""
    ids, offsets = tokens
    # One document's streamed windows (stream mode), shared by its windows and its anchored spans: the
    # anchors lie in text the windows' chunks already scored, so they cost no forward of their own.
    overlap = screen_config.context_tokens + spans_config.span_tokens
    stream = DocumentStream(ids, overlap, chunk_tokens(engine, screen_config, overlap))
    results = _screen(engine, ids, spans, screen_config, work, stream)
    anchors: list[Span] = []
    if spans_config.anchors:
        anchors = anchored_spans(
            doc, ids, offsets, spans, [results[s.span_id][0] for s in spans], spans_config, tokenizer_id
        )
    if anchors:
        results.update(_screen(engine, ids, anchors, screen_config, work, stream))
        log.debug("document %s: %d anchored spans beside %d windows", doc.doc_id, len(anchors), len(spans))
    ordered = sorted(spans + anchors, key=lambda s: (s.token_start, s.token_end))
    return [(s, *results[s.span_id]) for s in ordered]
