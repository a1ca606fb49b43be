"""Batched greedy generation on the HF engine (engine/generate.py) gives what generating one input at a
time gives: the same ids (EOS included), margins within rounding, the same verdicts, in batches of any size."""

import pytest
import torch

from scanner.config import PromptConfig
from scanner.engine import generate
from scanner.engine.hf import HFEngine
from scanner.engine.template import typed_ids
from scanner.studies.tiny import CANARIES

# Padded vs unpadded fp32 forwards of the tiny model differ by ~6e-6 in a margin (measured here).
MARGIN_TOLERANCE = 1e-4


@pytest.fixture(scope="module", params=["plain", "chat"])
def any_engine(request, loaded):
    if request.param == "plain":
        return HFEngine(loaded, PromptConfig())
    return HFEngine(loaded, PromptConfig(chat=True, instruction="Quote:"))


def _inputs(engine) -> list[list[int]]:
    """Mixed lengths: canary openings (which go on to reproduce the canary) and random prompts (which don't)."""
    gen = torch.Generator().manual_seed(0)
    pool = torch.tensor(engine.allowed_ids)
    noise = [engine.decode(pool[torch.randint(len(pool), (n,), generator=gen)].tolist()) for n in (1, 7, 15)]
    prompts = [c[:k] for c in CANARIES for k in (6, 30)] + noise + [""]
    return [ids for ids in typed_ids(engine.tokenizer, engine.template, prompts) if ids]


def _alone(engine, inputs, lengths):
    return [engine._generate_scored(ids, n) for ids, n in zip(inputs, lengths, strict=True)]


def _same(alone, batched):
    for (ids_a, m_a), (ids_b, m_b) in zip(alone, batched, strict=True):
        assert ids_a == ids_b
        assert len(m_a) == len(m_b) == len(ids_a)
        assert max((abs(a - b) for a, b in zip(m_a, m_b, strict=True)), default=0.0) < MARGIN_TOLERANCE


def test_batched_generation_equals_one_at_a_time(any_engine):
    inputs = _inputs(any_engine)
    lengths = [16 - (i % 3) * 5 for i in range(len(inputs))]  # rows of one batch asking for different lengths
    assert len({len(ids) for ids in inputs}) > 5, "inputs of many lengths"
    alone = _alone(any_engine, inputs, lengths)
    written = [any_engine.tokenizer.decode(ids) for ids, _ in alone]
    goes_on = [any(c[30:40] in w for c in CANARIES) for w in written]
    assert not all(goes_on)
    # some inputs go on with their canary; not inside a chat template, which the tiny model never saw
    assert any(goes_on) == (not any_engine.template.suffix_ids)
    any_engine.greedy.rows = 5  # batches that cut through the inputs
    try:
        _same(alone, any_engine.greedy.many(inputs, lengths))
    finally:
        any_engine.greedy.rows = None
    _same(alone, any_engine.greedy.many(inputs, lengths))


def test_rows_stop_at_eos_as_they_do_alone(engine):
    inputs = _inputs(engine)
    first = engine._generate_scored(inputs[0], 12)[0]
    config = engine.model.generation_config
    saved = config.eos_token_id
    config.eos_token_id = first[4]  # a token the first row writes mid-way: some rows stop early, some never
    try:
        alone = _alone(engine, inputs, [12] * len(inputs))
        assert len(alone[0][0]) == 5 and len({len(ids) for ids, _ in alone}) > 1, "some rows stop early"
        _same(alone, engine.greedy.many(inputs, [12] * len(inputs)))
    finally:
        config.eos_token_id = saved


def test_near_ties_are_generated_again_alone(engine, monkeypatch):
    inputs = _inputs(engine)[::2]
    alone = _alone(engine, inputs, [8] * len(inputs))
    monkeypatch.setattr(generate, "tie_tolerance", lambda model: float("inf"))  # every row a tie risk
    assert engine.greedy.many(inputs, [8] * len(inputs)) == alone  # exactly: each one generated alone


def test_out_of_memory_halves_the_batch(engine, monkeypatch):
    inputs = _inputs(engine)[:6]
    alone = _alone(engine, inputs, [8] * len(inputs))
    real = engine.model.generate

    def small_only(ids, **kwargs):  # a device that holds three rows at most
        if ids.shape[0] > 3:
            raise torch.OutOfMemoryError("test: more than three rows")
        return real(ids, **kwargs)

    monkeypatch.setattr(engine.model, "generate", small_only)
    try:
        _same(alone, engine.greedy.many(inputs, [8] * len(inputs)))
        assert engine.greedy.rows == 3
    finally:
        engine.greedy.rows = None


def test_verdicts_of_a_batch_equal_each_alone(any_engine):
    ids = any_engine.encode_target(CANARIES[1])
    target, opening = ids[8:], [any_engine.decode(ids[k:8]) for k in (0, 3, 6)]
    prompts = ["Green law price", opening[0], "", opening[2], "money story", opening[1]]
    together = any_engine.verify_many(prompts, target)
    for prompt, check in zip(prompts, together, strict=True):
        alone = any_engine.verify_many([prompt], target)[0]
        assert (check.generated_ids, check.verified_generation, check.matched_tokens) == (
            alone.generated_ids,
            alone.verified_generation,
            alone.matched_tokens,
        )
        assert check.min_margin == alone.min_margin  # teacher-forced: unpadded either way
    assert not all(c.verified_generation for c in together)
    # the tiny model learned its canaries without a chat template: inside one, nothing verifies
    assert any(c.verified_generation for c in together) == (not any_engine.template.suffix_ids)
    rank = next((i for i, c in enumerate(together) if c.verified_generation), len(prompts))
    first, before = any_engine.verify_first(prompts, target)
    assert before == rank and (first is None if rank == len(prompts) else first.prompt == prompts[rank])


def test_certificates_of_several_targets_in_one_call(engine):
    pairs = [(text[:25], engine.encode_target(text)) for text in CANARIES] + [("Green law", [5, 6, 7])]
    together = engine.verify_each(pairs)
    for (prompt, target), check in zip(pairs, together, strict=True):
        alone = engine.verify(prompt, target)
        assert check.generated_ids == alone.generated_ids and check.min_margin == alone.min_margin
