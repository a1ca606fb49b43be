"""GCG pieces on the tiny model: candidates, losses, scoring, OOM handling, determinism."""

import torch

from scanner.config import GCGConfig
from scanner.engine import batched
from scanner.engine.batched import TargetScorer
from scanner.engine.losses import exact_match, target_loss, token_margins
from scanner.search.driver import run_one
from scanner.search.gcg import run_gcg, sample_candidates
from scanner.studies.tiny import CANARIES


def test_candidates_are_distinct_swaps_from_the_allowed_top_k():
    gen = torch.Generator().manual_seed(0)
    grad = torch.randn(6, 50)
    grad[:, :10] = float("inf")  # disallowed ids
    prompt = torch.tensor([11, 12, 13, 14, 15, 16])
    config = GCGConfig(top_k=8, num_candidates=200, n_replace=2)
    cands = sample_candidates(prompt, grad, config, gen)
    assert len({tuple(c) for c in cands.tolist()}) == cands.shape[0]
    assert not (cands == prompt).all(1).any()
    top = (-grad).topk(8, dim=1).indices
    for row in cands:
        changed = torch.nonzero(row != prompt).flatten()
        assert 1 <= changed.numel() <= 2
        for pos in changed.tolist():
            assert row[pos] in top[pos] and row[pos] >= 10


def test_losses_agree_on_what_exact_means():
    target = torch.tensor([2, 0, 1])
    logits = torch.full((2, 3, 4), -5.0)
    logits[0, torch.arange(3), target] = 5.0  # candidate 0: right everywhere by a wide margin
    logits[1, torch.arange(3), torch.tensor([2, 0, 3])] = 5.0  # candidate 1: last token wrong
    assert exact_match(logits, target).tolist() == [True, False]
    assert token_margins(logits, target)[0].min() == 10.0
    margin = target_loss(logits, target, "margin")
    assert margin[0] == 0 and margin[1] > 0
    ce, wrong = target_loss(logits, target, "ce"), target_loss(logits, target, "wrong_ce")
    assert (ce > 0).all() and wrong[1] < ce[1] and ce[1] > ce[0]


def test_scores_match_per_candidate_forwards_and_survive_oom(engine, monkeypatch):
    ids = engine.encode_target(CANARIES[1])
    scorer = TargetScorer(engine, ids, "ce")
    prompts = torch.tensor(engine.allowed_ids[:40]).view(20, 2)
    whole = scorer.score(prompts)
    single = [scorer.score(p[None]) for p in prompts]
    assert torch.allclose(whole.loss, torch.cat([s.loss for s in single]), atol=1e-5)
    assert whole.exact.tolist() == [bool(s.exact[0]) for s in single]
    body = engine.model.base_model  # what every scoring forward runs through
    real = body.forward

    def small_memory(input_ids=None, **kw):
        if input_ids is not None and input_ids.shape[0] > 4:
            raise torch.OutOfMemoryError("simulated")
        return real(input_ids=input_ids, **kw)

    monkeypatch.setattr(body, "forward", small_memory)
    monkeypatch.setattr(engine, "chunk_size", None)
    monkeypatch.setattr(engine, "oom_ceiling", None)
    halved = scorer.score(prompts)
    length = scorer.sequences(prompts).shape[1]
    assert engine.oom_ceiling == (2 * length, 0)  # 20 -> 10 -> 5 -> 2 rows: halved until it fits
    assert torch.allclose(halved.loss, whole.loss, atol=1e-5)
    monkeypatch.setattr(body, "forward", real)  # the shortage passed: the ceiling holds a while, then goes
    for calls in range(1, batched.RELAX_AFTER):
        scorer.score(prompts)
        assert engine.oom_ceiling == (2 * length, calls)
    scorer.score(prompts)
    assert engine.oom_ceiling is None, "a passing shortage does not shrink every later chunk"


def test_gradient_points_to_the_canary_and_same_seed_same_run(engine):
    ids = engine.encode_target(CANARIES[0])
    scorer = TargetScorer(engine, ids, "margin")
    grad, loss, _ = scorer.gradient(torch.tensor(engine.allowed_ids[:3]))
    assert grad.shape == (3, engine.model.get_input_embeddings().weight.shape[0])
    assert (
        torch.isinf(grad[:, ~engine.allowed_mask]).all()
        and torch.isfinite(grad[:, engine.allowed_mask]).all()
    )
    config = GCGConfig(top_k=32, num_candidates=32, patience=None)
    runs = [
        run_one(
            engine, run_gcg(scorer, engine.allowed_ids[:3], 5, config, torch.Generator().manual_seed(7), 2)
        ).value
        for _ in range(2)
    ]
    assert runs[0].losses == runs[1].losses and runs[0].best_ids == runs[1].best_ids
    assert runs[0].best_loss <= loss
