"""Several targets per forward (engine/batched.py, search/driver.py) give what one target at a time
gives: the same scores and gradients (to float rounding), the same verdicts, a failing target failing
alone, and a model
whose logits are not its head on its body's states falling back to one target per forward."""

import logging

import pytest
import torch

from scanner.config import PromptConfig, SearchConfig
from scanner.engine import batched
from scanner.engine.batched import TargetScorer
from scanner.engine.hf import HFEngine
from scanner.engine.loading import LoadedModel
from scanner.engine.template import PromptTemplate
from scanner.search.driver import run_many
from scanner.search.gcg import Gradient, Score
from scanner.search.miniprompt import measure, measure_many
from scanner.search.request import SearchRequest
from scanner.studies.tiny import CANARIES


@pytest.fixture(scope="module", params=["plain", "chat"])
def any_engine(request, loaded):
    """The tiny model bare (BOS only) and inside a chat template (fixed tokens after the prompt)."""
    if request.param == "plain":
        return HFEngine(loaded, PromptConfig())
    return HFEngine(loaded, PromptConfig(chat=True, instruction="Quote:"))


def _items(engine, lengths):
    """(scorer, candidates) for targets of different lengths, prompts of different lengths."""
    gen = torch.Generator().manual_seed(0)
    pool = torch.tensor(engine.allowed_ids)
    return [
        (
            TargetScorer(engine, engine.encode_target(text), "margin"),
            pool[torch.randint(len(pool), (5 + i, n), generator=gen)],
        )
        for i, (text, n) in enumerate(zip(CANARIES, lengths, strict=False))
    ]


def test_scores_of_several_targets_equal_each_alone(any_engine):
    items = _items(any_engine, [2, 9, 5, 1])
    assert len({s.target.numel() for s, _ in items}) > 1, "targets of different lengths"
    alone = [scorer.score(c) for scorer, c in items]
    any_engine.chunk_size = 4  # chunks that cut through targets' rows
    try:
        together = batched.scores(any_engine, items)
    finally:
        any_engine.chunk_size = None
    for a, b, (_, c) in zip(alone, together, items, strict=True):
        assert b.loss.shape == (c.shape[0],)
        assert torch.allclose(a.loss, b.loss, atol=1e-5) and torch.equal(a.exact, b.exact)


def test_gradients_of_several_targets_equal_each_alone(any_engine):
    items = [(scorer, c[0]) for scorer, c in _items(any_engine, [3, 7, 1])]
    alone = [scorer.gradient(p) for scorer, p in items]
    together = batched.gradients(any_engine, items)
    for (ga, la, ea), (gb, lb, eb) in zip(alone, together, strict=True):
        assert torch.equal(torch.isinf(ga), torch.isinf(gb))
        finite = torch.isfinite(ga)
        assert torch.allclose(ga[finite], gb[finite], atol=1e-5)
        assert la == pytest.approx(lb, abs=1e-5) and ea == eb


def test_searches_sharing_forwards_find_what_each_finds_alone(engine, fast_config):
    texts = [*CANARIES, "Green law price money story."]
    config = SearchConfig(**{**fast_config.__dict__, "decide_steps": 40, "restarts": 0})
    alone = [measure(engine, t, config) for t in texts]
    together = dict(measure_many(engine, [(SearchRequest(t), config) for t in texts], width=3))
    assert sorted(together) == list(range(len(texts)))
    for a in alone[:4]:
        assert a.memorized, "the canaries are found"
    assert not alone[4].memorized
    for i, a in enumerate(alone):  # float rounding of other batch shapes may steer GCG elsewhere
        b = together[i]
        assert b.memorized == a.memorized and b.success == a.success and b.wall_s > 0
        assert not b.memorized or (b.verified_generation and b.acr > 1)
    assert sum(b.forwards for b in together.values()) <= 1.1 * sum(a.forwards for a in alone)


def test_a_failing_target_fails_alone(engine, fast_config):
    jobs = [
        (SearchRequest(CANARIES[0]), fast_config),
        (SearchRequest("x", target_ids=[5] * 300), fast_config),
        (SearchRequest(CANARIES[1]), fast_config),
    ]
    results = dict(measure_many(engine, jobs, width=3))
    assert "positions but the model has 256" in str(results[1])
    assert results[0].memorized and results[2].memorized


def test_auto_width_is_one_on_the_cpu_and_asked_widths_stand(engine):
    assert batched.width(engine, 0) == 1
    assert batched.width(engine, 4) == 4


def _bare(model) -> HFEngine:
    loaded = LoadedModel(
        model=model.eval().requires_grad_(False),
        tokenizer=None,
        device="cpu",
        dtype="float32",
        source="random",
    )
    return HFEngine.bare(
        loaded,
        PromptTemplate("", "", (1,), (1,), (), "BOS, uncounted"),
        list(range(3, model.config.vocab_size)),
    )


def test_a_model_that_scales_its_logits_runs_one_target_per_forward(caplog):
    from transformers import CohereConfig, CohereForCausalLM, LlamaConfig, LlamaForCausalLM

    shape = dict(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
    )
    torch.manual_seed(0)
    assert batched.supported(_bare(LlamaForCausalLM(LlamaConfig(**shape))))
    scaled = _bare(CohereForCausalLM(CohereConfig(**shape, logit_scale=0.5)))  # logits = head(h) * 0.5
    assert not batched.supported(scaled)

    def probe(target):  # a search of one gradient and one score request
        scorer = TargetScorer(scaled, target, "ce")
        _, loss, _ = yield Gradient(scorer, torch.tensor([5, 6, 7]))
        scores = yield Score(scorer, torch.tensor([[5, 6, 7], [8, 9, 10]]))
        return loss, scores.loss.tolist()

    targets = ([9, 10, 11], [12, 13])
    alone = [d.value for d in sorted(run_many(scaled, map(probe, targets), 1), key=lambda d: d.index)]
    with caplog.at_level(logging.WARNING):
        together = [d.value for d in sorted(run_many(scaled, map(probe, targets), 2), key=lambda d: d.index)]
    assert "one target per forward" in caplog.text
    assert together == alone
