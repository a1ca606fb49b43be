"""Spans stage with the real tiny tokenizer: windows, offsets, stable ids, skipped documents."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scanner.config import SpanConfig
from scanner.errors import InputError
from scanner.stages.read import Document
from scanner.stages.spans import make_spans, span_id, tokenize_document, windows

TEXT = (
    "Call me Ishmael. Some years ago, never mind how long precisely, having little or no money in my "
    "purse, and nothing particular to interest me on shore, I thought I would sail about a little."
)


@pytest.fixture(scope="module")
def tokenizer(tiny_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_dir)


def doc(text, doc_id="d1"):
    return Document(doc_id=doc_id, text=text)


def test_span_texts_are_document_slices_and_windows_are_adjacent(tokenizer):
    ids, offsets = tokenize_document(TEXT, tokenizer)
    spans = make_spans(doc(TEXT), tokenizer, SpanConfig(span_tokens=8), "tiny")
    assert len(spans) == len(ids) // 8  # the short tail is dropped with min_tokens = span_tokens
    for i, span in enumerate(spans):
        assert (span.token_start, span.token_end) == (8 * i, 8 * i + 8)
        assert span.target_ids == ids[span.token_start : span.token_end]
        assert (span.char_start, span.char_end) == (
            offsets[span.token_start][0],
            offsets[span.token_end - 1][1],
        )
        assert span.text == TEXT[span.char_start : span.char_end]
        assert span.skip_reason is None and not span.skipped
    assert "".join(s.text for s in spans) == TEXT[: spans[-1].char_end]


def test_targets_reproduce_the_document_tokenization(tokenizer):
    ids, offsets = tokenize_document(TEXT, tokenizer)
    assert ids == tokenizer(TEXT, add_special_tokens=False).input_ids
    assert len(offsets) == len(ids) and offsets[0][0] == 0 and offsets[-1][1] == len(TEXT)


def test_stride_and_min_tokens(tokenizer):
    n = len(tokenize_document(TEXT, tokenizer)[0])
    overlapping = make_spans(doc(TEXT), tokenizer, SpanConfig(span_tokens=10, stride=4), "tiny")
    assert [s.token_start for s in overlapping] == list(range(0, n - 10 + 1, 4))
    assert all(s.token_end - s.token_start == 10 for s in overlapping)
    with_tail = make_spans(doc(TEXT), tokenizer, SpanConfig(span_tokens=10, min_tokens=1), "tiny")
    assert with_tail[-1].token_end == n and with_tail[-1].char_end == len(TEXT)
    assert [s.target_ids for s in with_tail] == [
        tokenize_document(TEXT, tokenizer)[0][i : i + 10] for i in range(0, n, 10)
    ]
    with pytest.raises(InputError, match="--allow-gaps"):
        SpanConfig(span_tokens=4, stride=10)
    sparse = make_spans(doc(TEXT), tokenizer, SpanConfig(span_tokens=4, stride=10, allow_gaps=True), "tiny")
    assert [(s.token_start, s.token_end) for s in sparse][:2] == [(0, 4), (10, 14)]


def test_windows_stop_at_the_first_window_reaching_the_end():
    assert windows(10, SpanConfig(span_tokens=4, stride=2)) == [(0, 4), (2, 6), (4, 8), (6, 10)]
    assert windows(9, SpanConfig(span_tokens=4, stride=2, min_tokens=1)) == [(0, 4), (2, 6), (4, 8), (6, 9)]
    assert windows(9, SpanConfig(span_tokens=4)) == [(0, 4), (4, 8)]
    assert windows(9, SpanConfig(span_tokens=4, min_tokens=1)) == [(0, 4), (4, 8), (8, 9)]
    assert windows(3, SpanConfig(span_tokens=4, min_tokens=2)) == [(0, 3)]


def test_span_ids_are_stable_and_distinct(tokenizer):
    config = SpanConfig(span_tokens=8)
    first = [s.span_id for s in make_spans(doc(TEXT), tokenizer, config, "tiny")]
    assert first == [s.span_id for s in make_spans(doc(TEXT), tokenizer, config, "tiny")]
    assert len(set(first)) == len(first) and all(len(i) == 16 and int(i, 16) >= 0 for i in first)
    other_doc = [s.span_id for s in make_spans(doc(TEXT, "d2"), tokenizer, config, "tiny")]
    other_tokenizer = [s.span_id for s in make_spans(doc(TEXT), tokenizer, config, "tiny@rev2")]
    assert not set(first) & set(other_doc) and not set(first) & set(other_tokenizer)
    assert span_id("", "d1", 0, 8, "tiny") == first[0]
    assert span_id("f:0", "a1", 2, 8, "t") != span_id("f:0", "a", 12, 8, "t")
    # Two corpus rows sharing an id (--allow-duplicate-ids) never share span ids.
    rows = [
        [
            s.span_id
            for s in make_spans(Document(doc_id="d1", text=TEXT, row=f"f:{i}"), tokenizer, config, "tiny")
        ]
        for i in (0, 1)
    ]
    assert not set(rows[0]) & set(rows[1])


@pytest.mark.parametrize(
    ("text", "reason"), [(None, "null text"), ("", "empty text"), (" \n\t", "empty text")]
)
def test_null_and_empty_documents_yield_one_skipped_span(tokenizer, text, reason):
    (span,) = make_spans(doc(text), tokenizer, SpanConfig(), "tiny")
    assert span.skip_reason == reason and span.skipped
    assert span.target_ids == [] and span.text == "" and span.doc_id == "d1"
    assert (span.token_start, span.token_end, span.char_start, span.char_end) == (0, 0, 0, 0)


def test_short_document_is_skipped_with_its_count(tokenizer):
    text = "Call me Ishmael."
    n = len(tokenize_document(text, tokenizer)[0])
    (span,) = make_spans(doc(text), tokenizer, SpanConfig(span_tokens=32), "tiny")
    assert span.skip_reason == f"too short: {n} tokens < 32"
    assert span.target_ids == [] and span.text == text and span.token_end == n
    (short,) = make_spans(doc(text), tokenizer, SpanConfig(span_tokens=32, min_tokens=n + 1), "tiny")
    assert short.skip_reason == f"too short: {n} tokens < {n + 1}"
    (kept,) = make_spans(doc(text), tokenizer, SpanConfig(span_tokens=32, min_tokens=n), "tiny")
    assert kept.skip_reason is None and kept.text == text


def test_non_ascii_text_keeps_document_slices(tokenizer):
    text = "Naïve café — 日本語 text. " * 4
    for span in make_spans(doc(text), tokenizer, SpanConfig(span_tokens=5, min_tokens=1), "tiny"):
        assert span.text == text[span.char_start : span.char_end] and span.text


def test_config_validation():
    with pytest.raises(InputError, match="--span-tokens 0"):
        SpanConfig(span_tokens=0)
    with pytest.raises(InputError, match="--stride 0"):
        SpanConfig(stride=0)
    with pytest.raises(InputError, match="--min-tokens 40"):
        SpanConfig(span_tokens=32, min_tokens=40)
    assert SpanConfig(span_tokens=16).step == 16 and SpanConfig(span_tokens=16).minimum == 16


@settings(max_examples=60, deadline=None)
@given(
    text=st.text(
        alphabet=st.characters(min_codepoint=32, max_codepoint=126) | st.sampled_from("\n\t"),
        min_size=1,
        max_size=300,
    ),
    span_tokens=st.integers(1, 12),
)
def test_span_texts_recover_the_document_tokens_in_order(tokenizer, text, span_tokens):
    ids, _ = tokenize_document(text, tokenizer)
    spans = make_spans(doc(text), tokenizer, SpanConfig(span_tokens=span_tokens, min_tokens=1), "tiny")
    if not text.strip():
        assert [s.skip_reason for s in spans] == ["empty text"]
        return
    assert [t for s in spans for t in s.target_ids] == ids
    assert "".join(s.text for s in spans) == text
    assert all(s.text == text[s.char_start : s.char_end] for s in spans)
    assert [s.token_start for s in spans] == list(range(0, len(ids), span_tokens))
