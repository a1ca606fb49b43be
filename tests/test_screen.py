"""Screening on the tiny model: memorized spans stand out, certificates come from the document."""

import random

import pytest
import torch
import torch.nn.functional as F

from scanner.config import ScreenConfig
from scanner.stages.screen import ScreenWork, screen_spans
from scanner.stages.spans import Span, tokenize_document
from scanner.studies.tiny import CANARIES, salad


def span_at(doc, ids, offsets, start, end):
    a, b = offsets[start][0], offsets[end - 1][1]
    return Span(doc_id="d", span_id=f"s{start}", token_start=start, token_end=end, char_start=a, char_end=b,
                text=doc[a:b], target_ids=ids[start:end])


@pytest.fixture(scope="module")
def document(engine):
    rng = random.Random(3)
    before, canary = salad(rng, 12), CANARIES[1]
    doc = f"{before}\n{canary}\n{salad(rng, 12)}"
    ids, offsets = tokenize_document(doc, engine.tokenizer)
    start = next(i for i, (a, _) in enumerate(offsets) if a >= doc.index(canary))
    end = next(i for i, (_, b) in enumerate(offsets) if b >= doc.index(canary) + len(canary)) + 1
    return doc, ids, offsets, start, end


def test_memorized_span_stands_out_and_gets_a_certificate(engine, document):
    doc, ids, offsets, start, end = document
    length = end - start
    canary = span_at(doc, ids, offsets, start, end)
    other = span_at(doc, ids, offsets, len(ids) - length, len(ids))  # the salad after the canary
    hit, miss = screen_spans(engine, ids, [canary, other], ScreenConfig(context_tokens=16))
    assert hit.greedy_match_rate >= 0.9 and hit.discoverable  # the first token may need a closer cue
    assert hit.certificate_tokens is not None and hit.certificate_tokens <= 3
    assert hit.certificate_start == start - hit.certificate_tokens
    assert miss.greedy_match_rate < 0.6 and miss.certificate_tokens is None and not miss.discoverable
    assert hit.mean_nll < miss.mean_nll
    # the certificate, typed from the document's own text, really elicits the span by generation
    prompt = doc[offsets[hit.certificate_start][0]:canary.char_start]
    assert engine.verify(prompt, canary.target_ids).verified_generation


def test_padded_batch_equals_unpadded_forwards(engine, document):
    doc, ids, offsets, start, end = document
    spans = [span_at(doc, ids, offsets, s, s + 8) for s in (2, 9, start)]  # different context lengths
    got = screen_spans(engine, ids, spans, ScreenConfig(context_tokens=6, max_rows=5))
    for span, result in zip(spans, got, strict=True):
        context = ids[max(0, span.token_start - 6):span.token_start]
        seq = torch.tensor([[*engine.template.prefix_ids, *context, *span.target_ids]])
        logits = engine.logits(seq, keep=len(span.target_ids) + 1)[0, :-1]
        gold = torch.tensor(span.target_ids)
        assert result.greedy_match_rate == pytest.approx(float((logits.argmax(-1) == gold).float().mean()))
        assert result.mean_nll == pytest.approx(float(F.cross_entropy(logits, gold)), abs=1e-4)


def test_two_phase_screen_keeps_every_likely_certificate_and_skips_the_rest(engine, document):
    doc, ids, offsets, start, end = document
    length = end - start
    spans = [span_at(doc, ids, offsets, s, s + length) for s in range(start - 6, len(ids) - length, 3)]  # one starts at the canary
    full = screen_spans(engine, ids, spans, ScreenConfig(context_tokens=16))
    engine.forwards, before = 0, engine.forwards
    fast = screen_spans(engine, ids, spans, ScreenConfig(context_tokens=16, certificate_min_match=0.5))
    rows_fast, engine.forwards = engine.forwards, before
    assert any(f.certificate_tokens is not None for f in full), "the canary must give a certificate"
    for f, q in zip(full, fast, strict=True):
        assert (q.greedy_match_rate, q.discoverable) == (f.greedy_match_rate, f.discoverable)
        assert q.mean_nll == pytest.approx(f.mean_nll, abs=1e-5)
        kept = f.greedy_match_rate >= 0.5
        assert q.certificate_tokens == (f.certificate_tokens if kept else None)
    likely = sum(f.greedy_match_rate >= 0.5 for f in full)
    assert likely < len(spans)  # the salad spans were skipped, so the test measures a saving
    exhaustive_rows = sum(2 + min(16, s.token_start) for s in spans)
    assert rows_fast == 2 * len(spans) + sum(min(16, s.token_start) for s, f in zip(spans, full, strict=True)
                                             if f.greedy_match_rate >= 0.5) < exhaustive_rows


def test_certificate_min_match_is_validated():
    with pytest.raises(Exception, match="--certificate-min-match 1.5 must be in"):
        ScreenConfig(certificate_min_match=1.5)


def test_the_screen_counts_what_it_forwarded_row_by_row(engine, document):
    """Every span forwards a window row (template, context, span), a span row (template, span) and a
    certificate row per context length 1..context: the tokens a cost model multiplies the corpus by."""
    doc, ids, offsets, start, end = document
    spans = [span_at(doc, ids, offsets, s, s + 8) for s in (2, 9, start)]
    work = ScreenWork()
    screen_spans(engine, ids, spans, ScreenConfig(context_tokens=6, max_rows=5), work)
    fixed = len(engine.template.prefix_ids) + len(engine.template.suffix_ids) + 8
    contexts = [min(6, s.token_start) for s in spans]
    assert work.rows == sum(2 + c for c in contexts)
    assert work.tokens == sum(2 * fixed + c + sum(fixed + j for j in range(1, c + 1)) for c in contexts)
    assert work.head_positions == 8 * work.rows
    assert work.padded_tokens >= work.tokens  # HF's batches of 5 rows, left-padded to their longest
