"""Screening on the tiny model: memorized spans stand out, certificates come from the document."""

import random

import pytest
import torch
import torch.nn.functional as F

from scanner.config import ScreenConfig
from scanner.engine.token_scores import TokenScores
from scanner.stages.screen import ScreenWork, rounds, screen_spans
from scanner.stages.spans import Span, tokenize_document
from scanner.studies.tiny import CANARIES, salad


def span_at(doc, ids, offsets, start, end):
    a, b = offsets[start][0], offsets[end - 1][1]
    return Span(
        doc_id="d",
        span_id=f"s{start}",
        token_start=start,
        token_end=end,
        char_start=a,
        char_end=b,
        text=doc[a:b],
        target_ids=ids[start:end],
    )


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
    prompt = doc[offsets[hit.certificate_start][0] : canary.char_start]
    assert engine.verify(prompt, canary.target_ids).verified_generation


def test_padded_batch_equals_unpadded_forwards(engine, document):
    doc, ids, offsets, start, end = document
    spans = [span_at(doc, ids, offsets, s, s + 8) for s in (2, 9, start)]  # different context lengths
    got = screen_spans(engine, ids, spans, ScreenConfig(context_tokens=6, max_rows=5, window="exact"))
    for span, result in zip(spans, got, strict=True):
        context = ids[max(0, span.token_start - 6) : span.token_start]
        seq = torch.tensor([[*engine.template.prefix_ids, *context, *span.target_ids]])
        logits = engine.logits(seq, keep=len(span.target_ids) + 1)[0, :-1]
        gold = torch.tensor(span.target_ids)
        assert result.greedy_match_rate == pytest.approx(float((logits.argmax(-1) == gold).float().mean()))
        assert result.mean_nll == pytest.approx(float(F.cross_entropy(logits, gold)), abs=1e-4)


def test_two_phase_screen_keeps_every_likely_certificate_and_skips_the_rest(engine, document):
    doc, ids, offsets, start, end = document
    length = end - start
    spans = [
        span_at(doc, ids, offsets, s, s + length) for s in range(start - 6, len(ids) - length, 3)
    ]  # one starts at the canary
    full_work, fast_work = ScreenWork(), ScreenWork()
    full = screen_spans(
        engine, ids, spans, ScreenConfig(context_tokens=16, certificate_min_match=0.0), full_work
    )
    fast = screen_spans(
        engine, ids, spans, ScreenConfig(context_tokens=16, certificate_min_match=0.5), fast_work
    )
    assert any(f.certificate_tokens is not None for f in full), "the canary must give a certificate"
    for f, q in zip(full, fast, strict=True):
        assert q.greedy_match_rate == f.greedy_match_rate and q.window_matches == f.window_matches
        assert q.mean_nll == pytest.approx(f.mean_nll, abs=1e-5)
        kept = f.greedy_match_rate >= 0.5
        assert q.certificate_tokens == (f.certificate_tokens if kept else None)
        assert q.discoverable == (f.discoverable if kept else None)  # None: the span row did not run
    likely = sum(f.greedy_match_rate >= 0.5 for f in full)
    assert likely < len(spans)  # the salad spans were skipped, so the test measures a saving
    assert fast_work.rows < full_work.rows and fast_work.tokens < full_work.tokens


def shortest_certificate(engine, ids, span, context):
    """The exhaustive screen's certificate by brute force: every j from 1 up, one forward each."""
    for j in range(1, min(context, span.token_start) + 1):
        seq = torch.tensor(
            [[*engine.template.prefix_ids, *ids[span.token_start - j : span.token_start], *span.target_ids]]
        )
        logits = engine.logits(seq, keep=len(span.target_ids) + 1)[0, :-1]
        if (logits.argmax(-1) == torch.tensor(span.target_ids)).all():
            return j
    return None


def test_certificate_rounds_find_the_exhaustive_shortest_context(engine, document):
    """Rounds of doubling lengths stop a span at its first success, after every shorter j was tried:
    the shortest j, whether or not a longer context elicits whenever a shorter one does."""
    assert (
        rounds(32) == [(1, 2), (3, 4), (5, 8), (9, 16), (17, 32)]
        and rounds(0) == []
        and rounds(1) == [(1, 1)]
    )
    doc, ids, offsets, start, end = document
    spans = [
        span_at(doc, ids, offsets, s, s + 8) for s in range(start - 2, end - 8)
    ]  # inside and around the canary
    got = screen_spans(
        engine,
        ids,
        spans,
        ScreenConfig(context_tokens=12, window="exact", certificate_min_match=0.0, certificate_max_tokens=12),
    )
    want = [shortest_certificate(engine, ids, s, 12) for s in spans]
    assert [g.certificate_tokens for g in got] == want
    assert any(w is not None for w in want) and any(w is None for w in want)
    assert [g.certificate_start for g in got] == [
        None if w is None else s.token_start - w for s, w in zip(spans, want, strict=True)
    ]


def test_certificates_stop_one_token_short_of_the_span_by_default(engine, document):
    """A certificate as long as its span or longer proves no ACR > 1: by default none is tried, the
    shorter ones are the same, and the spans without one forward fewer tokens."""
    doc, ids, offsets, start, end = document
    spans = [
        span_at(doc, ids, offsets, s, s + 3) for s in range(start + 1, end - 3)
    ]  # short spans of the canary
    capped, whole = ScreenWork(), ScreenWork()
    default = screen_spans(
        engine, ids, spans, ScreenConfig(context_tokens=8, window="exact", certificate_min_match=0.0), capped
    )
    every = screen_spans(
        engine,
        ids,
        spans,
        ScreenConfig(context_tokens=8, window="exact", certificate_min_match=0.0, certificate_max_tokens=8),
        whole,
    )
    want = [shortest_certificate(engine, ids, s, 8) for s in spans]
    assert [g.certificate_tokens for g in every] == want
    assert any(w is not None and w >= 3 for w in want), want  # some certificate only a long context gives
    assert [g.certificate_tokens for g in default] == [w if w is not None and w < 3 else None for w in want]
    assert capped.tokens < whole.tokens
    assert (
        ScreenConfig(context_tokens=8).certificate_limit(16) == 8
        and ScreenConfig().certificate_limit(16) == 15
    )
    with pytest.raises(Exception, match="--certificate-max-tokens -1 must be >= 0"):
        ScreenConfig(certificate_max_tokens=-1)


def test_certificate_min_match_is_validated():
    with pytest.raises(Exception, match="--certificate-min-match 1.5 must be in"):
        ScreenConfig(certificate_min_match=1.5)


def test_the_screen_counts_what_it_forwarded_row_by_row(engine, document):
    """Exact windows, exhaustive: every span forwards a window row (template, context, span), a span row
    (template, span) and certificate rows of context lengths 1..context in rounds, up to the round of
    its certificate, each through the window's first miss, then whole where it matched there (brute
    force says which): the tokens a cost model multiplies the corpus by."""
    doc, ids, offsets, start, end = document
    spans = [span_at(doc, ids, offsets, s, s + 8) for s in (2, 9, start)]
    work = ScreenWork()
    got = screen_spans(
        engine,
        ids,
        spans,
        ScreenConfig(context_tokens=6, max_rows=5, window="exact", certificate_min_match=0.0),
        work,
    )
    template = len(engine.template.prefix_ids) + len(engine.template.suffix_ids)

    def tried(span, result):  # certificate lengths forwarded: all rounds, or through the one that found it
        last = min(6, span.token_start)
        if result.certificate_tokens is not None:
            last = min(last, next(hi for lo, hi in rounds(6) if lo <= result.certificate_tokens <= hi))
        return list(range(1, last + 1))

    def rows(span, result):  # (context, span tokens) of each certificate row forwarded
        first = next((t for t, ok in enumerate(result.window_matches) if not ok), 8) + 1
        out = []
        for j in tried(span, result):
            out.append((j, min(first, 8)))
            if first < 8 and matched(span, j, first):
                out.append((j, 8))
        return out

    def matched(span, j, cut):
        seq = torch.tensor(
            [
                [
                    *engine.template.prefix_ids,
                    *ids[span.token_start - j : span.token_start],
                    *span.target_ids[:cut],
                ]
            ]
        )
        return bool(
            (engine.logits(seq, keep=cut + 1)[0, :-1].argmax(-1) == torch.tensor(span.target_ids[:cut])).all()
        )

    certificate = [rows(s, r) for s, r in zip(spans, got, strict=True)]
    contexts = [min(6, s.token_start) for s in spans]
    assert any(len(c) > len(tried(s, r)) for s, r, c in zip(spans, got, certificate, strict=True)), (
        "none went on"
    )
    assert work.rows == sum(2 + len(c) for c in certificate)
    assert work.tokens == sum(
        2 * (template + 8) + c + sum(template + j + n for j, n in rows_)
        for c, rows_ in zip(contexts, certificate, strict=True)
    )
    assert work.head_positions == sum(16 + sum(n for _, n in rows_) for rows_ in certificate)
    assert work.padded_tokens >= work.tokens  # HF's batches of 5 rows, right-padded to their longest


def test_certificate_rows_cut_at_the_windows_first_miss_give_the_same_certificates_for_fewer_tokens(
    engine, document, monkeypatch
):
    """A certificate row goes first through the span's first token its window missed, and on only where it
    matched there: the certificates are the brute-force shortest still, for fewer forwarded tokens."""
    import scanner.stages.screen as screen

    def window(bits):
        return TokenScores(
            matches=torch.tensor([b == "1" for b in bits]), nll=torch.zeros(len(bits)), topk=None
        )

    assert screen.cuts(window("1101")) == [3, 4] and screen.cuts(window("0111")) == [1, 4]
    assert screen.cuts(window("1111")) == [4] and screen.cuts(window("1110")) == [4]
    doc, ids, offsets, start, end = document
    spans = [span_at(doc, ids, offsets, s, s + 16) for s in range(max(1, start - 4), len(ids) - 16, 2)]
    config = ScreenConfig(context_tokens=12, window="exact", certificate_min_match=0.0)
    cut_work, whole_work = ScreenWork(), ScreenWork()
    cut = screen_spans(engine, ids, spans, config, cut_work)
    monkeypatch.setattr(screen, "cuts", lambda w: [w.matches.numel()])
    whole = screen_spans(engine, ids, spans, config, whole_work)
    want = [shortest_certificate(engine, ids, s, 12) for s in spans]
    assert [g.certificate_tokens for g in cut] == [g.certificate_tokens for g in whole] == want
    assert any(w is not None for w in want) and any(w is None for w in want)
    assert cut_work.tokens < whole_work.tokens and cut_work.rows > whole_work.rows
