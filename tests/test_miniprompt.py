"""MiniPrompt end to end on the tiny memorizing model."""

import random

import pytest

from scanner.config import GCGConfig, PromptConfig, SearchConfig
from scanner.engine.hf import HFEngine
from scanner.engine.template import typed_ids
from scanner.search.miniprompt import measure
from scanner.search.request import Certificate, Decided, SearchRequest, Warm
from scanner.studies.tiny import CANARIES, salad


@pytest.fixture(scope="module")
def canary_results(engine, fast_config):
    return [measure(engine, c, fast_config) for c in CANARIES]


def test_canaries_are_memorized_and_verified_by_generation(engine, canary_results):
    for result in canary_results:
        assert result.memorized and result.success and result.verified_generation
        assert result.acr > 1 and result.prompt_tokens < result.target_tokens
        assert result.acr == result.target_tokens / max(result.prompt_tokens, 1)
        # the reported string, typed in, gives the reported ids and reproduces the target
        assert typed_ids(engine.tokenizer, engine.template, [result.prompt])[0][1:] == result.prompt_ids
        check = engine.verify(result.prompt, result.target_ids)
        assert check.verified_generation and check.min_margin == pytest.approx(result.min_margin, abs=1e-4)
        assert result.thresholds["tau"]["memorized"]
        assert set(result.thresholds) == {"tau", "gzip", "zlib", "lzma", "smaz"}


def test_the_search_probes_short_then_descends(canary_results):
    result = canary_results[1]
    lengths = [t["length"] for t in result.trace]
    assert lengths[0] == 0 and lengths[1] == 5 and result.trace[1]["success"]  # the probe proves it
    assert lengths[-1] == result.prompt_tokens - 1 and not result.trace[-1]["success"]


def test_the_driver_splits_steps_forwards_and_seconds_into_deciding_and_shrinking(canary_results):
    """Deciding: the attempts up to and including the first verified success; shrinking: after it."""
    for result in canary_results:
        deciding, shrinking = result.stages["deciding"], result.stages["shrinking"]
        first = next(i for i, t in enumerate(result.trace) if t["success"])
        assert deciding["steps"] == sum(t["steps"] for t in result.trace[: first + 1])
        assert deciding["steps"] + shrinking["steps"] == result.steps
        assert deciding["forwards"] + shrinking["forwards"] == result.forwards
        assert deciding["seconds"] + shrinking["seconds"] == pytest.approx(result.wall_s)
        assert (
            deciding["forwards"] > 0 and shrinking["forwards"] > 0
        )  # both stages ran (the probe, then descent)


@pytest.mark.parametrize("text", [salad(random.Random(5), 8), "q8ZrT2mXv0LpW4nB7yKc"])
def test_unseen_text_is_not_memorized(engine, fast_config, text):
    result = measure(engine, text, fast_config)
    assert not result.memorized and not result.success
    assert result.stages["shrinking"] == {
        "steps": 0,
        "forwards": 0,
        "seconds": 0.0,
    }  # all of it decided nothing
    assert result.stages["deciding"]["forwards"] == result.forwards
    assert result.acr == pytest.approx(result.target_tokens / result.cap)
    assert not any(f["memorized"] for f in result.thresholds.values())


def test_same_seed_same_result(engine, fast_config, canary_results):
    again = measure(engine, CANARIES[0], fast_config)
    first = canary_results[0]
    assert (again.prompt_ids, again.steps, again.trace) == (first.prompt_ids, first.steps, first.trace)


def test_a_teacher_forced_match_that_generation_refutes_is_no_success(engine, fast_config, monkeypatch):
    real = engine.verify_many  # every verification of the engine goes through it, batched or one

    def refuting(prompts, target_ids):
        return [type(c)(**{**c.__dict__, "verified_generation": False}) for c in real(prompts, target_ids)]

    monkeypatch.setattr(engine, "verify_many", refuting)
    result = measure(
        engine, CANARIES[3], SearchConfig(**{**fast_config.__dict__, "decide_steps": 20, "restarts": 0})
    )
    assert not result.success and not result.memorized
    assert result.rejected_matches > 0


def test_paper_schedule_follows_the_authors_order(engine):
    config = SearchConfig.paper(
        paper_steps=60, gcg=GCGConfig(top_k=64, num_candidates=64, loss="ce", patience=None)
    )
    result = measure(engine, CANARIES[3], config)
    lengths = [t["length"] for t in result.trace]
    assert lengths[0] == 5 and result.trace[0]["success"]
    assert lengths == list(range(5, lengths[-1] - 1, -1))  # 5, 4, 3, ... down to the first failure or 1
    assert result.memorized and result.prompt_tokens == (
        lengths[-1] + 1 if not result.trace[-1]["success"] else 1
    )


def test_a_request_starts_from_one_known_prompt_and_refuses_anything_else():
    request = SearchRequest("text", [1, 2], Decided("decided", certificate="before"))
    assert (request.decided, request.certificate, request.warm, request.target_ids) == (
        "decided",
        "before",
        None,
        (1, 2),
    )
    warm = SearchRequest("text", known=Warm("from A"))
    assert (warm.warm, warm.certificate, warm.decided) == ("from A", None, None)
    with pytest.raises(TypeError, match="Certificate"):
        SearchRequest("text", known="a bare prompt: which start it is cannot be told")


def test_natural_prefix_is_a_certificate(engine, fast_config):
    text = CANARIES[2]
    ids = engine.encode_target(text)
    prefix_ids = ids[:3]
    prefix = engine.decode(prefix_ids)
    target = engine.decode(ids[3:])
    result = measure(engine, SearchRequest(target, known=Certificate(prefix)), fast_config)
    assert result.certificate_tokens is not None and result.memorized
    assert result.prompt_tokens <= result.certificate_tokens
    missed = measure(
        engine,
        SearchRequest(target, known=Certificate("red blue green")),
        SearchConfig(**{**fast_config.__dict__, "decide_steps": 5}),
    )
    assert missed.certificate_tokens is None


def test_chat_mode_counts_only_the_free_tokens(loaded, fast_config):
    chat = HFEngine(loaded, PromptConfig(chat=True, instruction="Quote:"))
    result = measure(chat, CANARIES[3], fast_config)
    assert result.success and result.verified_generation
    full = typed_ids(chat.tokenizer, chat.template, [result.prompt])[0]
    assert len(full) == len(chat.template.prefix_ids) + result.prompt_tokens + len(chat.template.suffix_ids)


def test_bounding_unmemorized_text_reports_a_real_acr_below_tau(engine, fast_config):
    config = SearchConfig(
        **{**fast_config.__dict__, "bound_unmemorized": True, "decide_steps": 60, "restarts": 0}
    )
    # Whether 60 steps find an eliciting prompt for a given unseen text depends on the tiny model's
    # weights (which vary with the threads that trained it): the first of three texts that yields one.
    for text in ("Green law.", "Field month.", "Green law price."):
        result = measure(engine, text, config)
        assert not result.memorized
        grows = [t for t in result.trace if t["warm"] == "grow"]
        assert grows, result.trace  # longer lengths were tried from the best failed prompt
        if result.success:
            break
    # The point of bounding: a prompt at least as long as the text elicits it, so the ACR is a real
    # one (measured, verified by generation), not the cap's target/|x*| stand-in; and it is <= tau.
    assert result.success, result.trace
    assert result.verified_generation and result.prompt_tokens >= result.target_tokens
    assert result.prompt_tokens < result.cap, "the bound came from a search, not from the cap"
    assert result.acr == result.target_tokens / result.prompt_tokens <= config.tau
    assert not result.thresholds["tau"]["memorized"]
