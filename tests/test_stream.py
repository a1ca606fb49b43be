"""Streamed windows (stages/stream.py) against exact windows on the tiny model, and the teacher-forced
scores' memory bound (engine/teacher.py): the head's logits in slices, the forwards in bounded batches."""

from __future__ import annotations

import random

import pytest
import torch

from scanner.config import CorpusConfig, ModelConfig, PromptConfig, ScanConfig, ScreenConfig
from scanner.engine import teacher
from scanner.engine.hf import HFEngine
from scanner.errors import InputError
from scanner.stages.screen import ScreenWork, screen_spans
from scanner.stages.spans import Span, tokenize_document
from scanner.stages.stream import DocumentStream, resolve_window, stream_windows, window_info
from scanner.studies.tiny import CANARIES, salad


def spans_of(ids: list[int], starts, length: int) -> list[Span]:
    return [
        Span(
            doc_id="d",
            span_id=f"s{s}",
            token_start=s,
            token_end=s + length,
            char_start=0,
            char_end=0,
            text="",
            target_ids=ids[s : s + length],
        )
        for s in starts
    ]


@pytest.fixture(scope="module")
def long_doc(engine):
    """About 250 tokens: salad, a canary, salad, the canary again, salad."""
    rng = random.Random(5)
    text = "\n".join([salad(rng, 30), CANARIES[2], salad(rng, 40), CANARIES[2], salad(rng, 30)])
    ids, offsets = tokenize_document(text, engine.tokenizer)
    at = [
        next(i for i, (a, _) in enumerate(offsets) if a >= text.index(CANARIES[2], k))
        for k in (0, text.index(CANARIES[2]) + 1)
    ]
    return ids, at


def test_streamed_windows_equal_exact_windows_where_the_context_is_the_same(engine, long_doc):
    """Spans starting within context_tokens of the document's start see the same text either way."""
    ids, _ = long_doc
    spans = spans_of(ids, range(0, 9), 8)
    exact = screen_spans(engine, ids, spans, ScreenConfig(context_tokens=8, window="exact"))
    stream = screen_spans(engine, ids, spans, ScreenConfig(context_tokens=8, window="stream"))
    for e, s in zip(exact, stream, strict=True):
        assert s.window_matches == e.window_matches and s.greedy_match_rate == e.greedy_match_rate
        assert s.mean_nll == pytest.approx(e.mean_nll, abs=1e-4)
        assert s.log_pz_topk == pytest.approx(e.log_pz_topk, abs=1e-3)
        assert (s.certificate_tokens, s.discoverable) == (e.certificate_tokens, e.discoverable)


def test_each_streamed_token_sees_at_least_its_exact_window(engine, long_doc):
    """Chunks of 40 tokens, overlap 8 + 8: every span's tokens are scored from the chunk that starts at
    least context + offset tokens before them, and equal a forward of that chunk's text."""
    ids, _ = long_doc
    stream = DocumentStream(ids, overlap=16, chunk=40)
    for p in range(len(ids)):
        first, lo, hi = stream.reads(stream.index(p))
        assert lo <= p < hi and (first == 0 or p - first >= 16) and hi - first <= 40
    spans = spans_of(ids, range(20, len(ids) - 8, 7), 8)
    got = screen_spans(
        engine, ids, spans, ScreenConfig(context_tokens=8, window="stream", chunk_tokens=40), None, stream
    )
    assert len(stream.chunks) > 4  # the document took several chunks
    prefix = list(engine.template.prefix_ids)
    greedy = {}  # document position -> argmax given its chunk's text, one plain forward per chunk
    for k in stream.chunks:
        first, lo, hi = stream.reads(k)
        logits = engine.logits(torch.tensor([prefix + ids[first:hi]]))[0]
        greedy.update({p: int(logits[len(prefix) + p - first - 1].argmax()) for p in range(lo, hi)})
    for span, result in zip(spans, got, strict=True):
        assert list(result.window_matches) == [
            greedy[p] == ids[p] for p in range(span.token_start, span.token_end)
        ]


def test_streamed_screen_finds_the_canaries_in_about_one_pass_over_the_document(engine, long_doc):
    ids, at = long_doc
    spans = spans_of(ids, range(0, len(ids) - 10, 10), 10)
    work = ScreenWork()
    got = screen_spans(
        engine, ids, spans, ScreenConfig(context_tokens=16, window="stream", certificate_min_match=0.5), work
    )
    for start in at:  # the window that starts on or just after each canary copy's first token is memorized
        hit = next(r for s, r in zip(spans, got, strict=True) if start < s.token_start <= start + 10)
        assert hit.greedy_match_rate >= 0.8 and hit.certificate_tokens is not None
    assert min(r.greedy_match_rate for s, r in zip(spans, got, strict=True) if s.token_end <= at[0]) < 0.5
    stream = DocumentStream(ids, overlap=26, chunk=255)
    _, (lengths, padded, scored) = stream_windows(
        engine, stream, [(s.token_start, s.token_end) for s in spans], ScreenConfig(context_tokens=16)
    )
    chunks, prefix = len(lengths), len(engine.template.prefix_ids)
    assert scored == len(ids) and chunks == 2  # every position scored once, in two chunks of 255
    assert sum(lengths) == len(ids) + (chunks - 1) * 26 + chunks * prefix <= padded


def test_window_mode_resolves_from_the_template(loaded, engine):
    chat = HFEngine(loaded, PromptConfig(chat=True))
    assert (
        resolve_window(engine, ScreenConfig()) == "stream" and resolve_window(chat, ScreenConfig()) == "exact"
    )
    with pytest.raises(InputError, match="--screen-window exact or auto"):
        resolve_window(chat, ScreenConfig(window="stream"))
    info = window_info(engine, ScreenConfig(), 32)
    assert info["chunk_tokens"] == engine.max_positions - 1  # capped: 255
    assert (
        info["chunk_capped_by"] == f"positions ({engine.max_positions})"
        and info["chunk_tokens_asked"] == 1024
    )
    with pytest.raises(InputError, match="--screen-window 'sliding' is not one of"):
        ScreenConfig(window="sliding")
    with pytest.raises(
        InputError, match="--chat puts the template's suffix between them"
    ):  # refused before a load
        ScanConfig(
            corpus=CorpusConfig(path="c.parquet"),
            model=ModelConfig(model="m"),
            prompt=PromptConfig(chat=True),
            screen=ScreenConfig(window="stream"),
        )


def test_logits_come_in_slices_and_forwards_in_bounded_batches(engine, long_doc, monkeypatch):
    """A slice of 16 positions' logits at a time, batches of at most 64 tokens: the same scores as one
    unbounded forward, and no head call or batch above the bound (peak memory set by them)."""
    ids, _ = long_doc
    spans = spans_of(ids, range(8, 120, 8), 8)
    config = ScreenConfig(context_tokens=8, window="exact", certificate_min_match=0.0)
    want = screen_spans(engine, ids, spans, config)
    heads, bodies = [], []
    hooks = [
        engine.model.get_output_embeddings().register_forward_hook(lambda m, a, o: heads.append(a[0].shape)),
        engine.model.base_model.register_forward_hook(
            lambda m, a, k, o: bodies.append(k["input_ids"].shape), with_kwargs=True
        ),
    ]
    monkeypatch.setitem(teacher.HEAD_ELEMENTS, "cpu", 16 * engine.model.config.vocab_size)
    try:
        got = screen_spans(
            engine,
            ids,
            spans,
            ScreenConfig(context_tokens=8, window="exact", certificate_min_match=0.0, batch_tokens=64),
        )
    finally:
        for hook in hooks:
            hook.remove()
    assert max(shape[0] for shape in heads) <= 16 and max(b * t for b, t in bodies) <= 64
    for g, w in zip(got, want, strict=True):
        assert (g.window_matches, g.certificate_tokens, g.discoverable) == (
            w.window_matches,
            w.certificate_tokens,
            w.discoverable,
        )
        assert g.mean_nll == pytest.approx(w.mean_nll, abs=1e-5)
