"""Probabilistic extraction (scanner/measures/extraction.py): the math against direct computation, and the screen's
p_z against softmax and top-k done by hand on the tiny model's logits."""

from __future__ import annotations

import math
import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from scanner.config import ExtractionConfig, ScreenConfig
from scanner.engine.losses import topk_logprobs
from scanner.errors import InputError
from scanner.measures.extraction import (
    columns,
    extraction_probability,
    log1mexp,
    np_discoverable,
)
from scanner.stages.screen import screen_spans
from scanner.stages.spans import Span, tokenize_document
from scanner.studies.tiny import CANARIES, salad


@settings(max_examples=80, deadline=None)
@given(pz=st.floats(1e-6, 1.0), n=st.integers(1, 10_000))
def test_extraction_probability_equals_the_direct_formula(pz, n):
    assert extraction_probability(math.log(pz), n) == pytest.approx(1 - (1 - pz) ** n, rel=1e-9, abs=1e-12)


def test_extremes_stay_exact_where_the_direct_formula_fails():
    assert 1 - (1 - math.exp(-700.0)) ** 10**6 == 0.0  # 1 - p_z rounds to 1
    assert extraction_probability(-700.0, 10**6) == pytest.approx(10**6 * math.exp(-700.0), rel=1e-9)
    assert 1 - (1 - math.exp(-40.0)) ** 1000 == 0.0 and extraction_probability(-40.0, 1000) > 0
    assert extraction_probability(-1e-20, 5) == 1.0 and extraction_probability(0.0, 1) == 1.0
    assert extraction_probability(-math.inf, 10**9) == 0.0
    assert log1mexp(-1e-20) == pytest.approx(math.log(1e-20)) and log1mexp(-50.0) == pytest.approx(
        -math.exp(-50.0)
    )


def test_threshold_is_where_the_verdict_turns():
    config = ExtractionConfig()  # n = 1000, p = 0.5
    assert config.threshold == pytest.approx(1 - 0.5 ** (1 / 1000))
    assert np_discoverable(math.log(config.threshold * 1.001), config.n, config.p)
    assert not np_discoverable(math.log(config.threshold * 0.999), config.n, config.p)
    row = columns(math.log(0.25), 0.0, config)
    assert row["np_discoverable"] and row["pz_topk"] == pytest.approx(0.25)
    assert row["log10_pz_topk"] == pytest.approx(math.log10(0.25)) and row["np_n"] == 1000
    assert columns(None, None, config)["np_discoverable"] is None


def test_config_is_validated():
    for bad, flag in (
        ({"top_k": 0}, "--pz-top-k 0"),
        ({"temperature": 0.0}, "--pz-temperature 0.0"),
        ({"n": 0}, "--pz-n 0"),
        ({"p": 1.5}, "--pz-p 1.5"),
    ):
        with pytest.raises(InputError, match=flag):
            ExtractionConfig(**bad)


def by_hand(logits: list[float], token: int, k: int, temperature: float) -> float:
    """Probability of `token` under top-k sampling, in plain Python: sort, keep k, softmax at T."""
    top = sorted(range(len(logits)), key=lambda i: -logits[i])[:k]
    if token not in top:
        return 0.0
    weights = {i: math.exp((logits[i] - logits[top[0]]) / temperature) for i in top}
    return weights[token] / sum(weights.values())


def test_topk_logprobs_equal_a_hand_computation():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 50, generator=gen) * 3
    gold = torch.tensor(
        [int(logits[i].argsort(descending=True)[r]) for i, r in enumerate((0, 1, 4, 5, 6, 30))]
    )
    for k, t in ((5, 1.0), (6, 0.7), (50, 1.3)):
        got = topk_logprobs(logits, gold, k, t).exp().tolist()
        want = [by_hand(logits[i].tolist(), int(gold[i]), k, t) for i in range(6)]
        assert got == pytest.approx(want, abs=1e-6)
    assert topk_logprobs(logits, gold, 5, 1.0)[4] == -math.inf  # rank 6 of 50 is outside the top 5


@pytest.fixture(scope="module", params=["exact", "stream"])
def screened(engine, request):
    """A canary and a salad span of one document, screened with 12 tokens of context: exactly those
    (exact windows) or the whole document before the span (streamed, the document within one chunk)."""
    rng = random.Random(11)
    doc = f"{salad(rng, 14)}\n{CANARIES[0]}\n{salad(rng, 14)}"
    ids, offsets = tokenize_document(doc, engine.tokenizer)
    start = next(i for i, (a, _) in enumerate(offsets) if a >= doc.index(CANARIES[0]))
    spans = [
        Span(
            doc_id="d",
            span_id=f"s{s}",
            token_start=s,
            token_end=s + 12,
            char_start=0,
            char_end=0,
            text="",
            target_ids=ids[s : s + 12],
        )
        for s in (start + 1, len(ids) - 12)
    ]
    config = ScreenConfig(
        context_tokens=12, window=request.param, extraction=ExtractionConfig(top_k=40, temperature=1.0)
    )
    return ids, spans, screen_spans(engine, ids, spans, config), request.param


def test_screen_pz_equals_softmax_and_topk_by_hand(engine, screened):
    ids, spans, results, window = screened
    for span, result in zip(spans, results, strict=True):
        context = ids[max(0, span.token_start - 12) if window == "exact" else 0 : span.token_start]
        seq = torch.tensor(
            [[*engine.template.prefix_ids, *context, *engine.template.suffix_ids, *span.target_ids]]
        )
        logits = engine.logits(seq, keep=13)[0, :-1].double().tolist()
        probs = [by_hand(row, token, 40, 1.0) for row, token in zip(logits, span.target_ids, strict=True)]
        greedy = all(
            max(range(len(row)), key=row.__getitem__) == t
            for row, t in zip(logits, span.target_ids, strict=True)
        )
        assert result.pz_greedy == (1.0 if greedy else 0.0)
        if 0.0 in probs:
            assert result.log_pz_topk == -math.inf
        else:
            assert result.log_pz_topk == pytest.approx(sum(math.log(p) for p in probs), abs=1e-3)
    canary, other = results
    assert canary.pz_greedy == 1.0 and math.exp(canary.log_pz_topk) > 0.5  # memorized: near-certain
    assert other.pz_greedy == 0.0 and other.log_pz_topk < math.log(1e-6)  # salad: no sampler finds it
    config = ExtractionConfig()
    assert columns(canary.log_pz_topk, canary.pz_greedy, config)["np_discoverable"]
    assert not columns(other.log_pz_topk, other.pz_greedy, config)["np_discoverable"]
