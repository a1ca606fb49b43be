"""The validity study (bench/validity/validity.py) in miniature: a tiny Llama trained on real text
with canaries planted 1 and 64 times. The 64-times canaries must score a higher ACR than the once-seen ones, and
random token strings must never be memorized."""

import random

import pytest

from scanner.config import GCGConfig, ModelConfig, PromptConfig, SearchConfig
from scanner.studies.validity import (
    CorpusSpec,
    ModelSize,
    build_corpus,
    longest_copy,
    measure_target,
    random_control,
    summarize,
    train_models,
)

SPEC = CorpusSpec(counts=(1, 64), canaries_per_count=2, heldout=2, max_chars=40_000)
SIZE = ModelSize(name="ci", hidden=64, layers=2, heads=4, batch=8, lr=6e-3)
# One short attempt at the decision length; a short descent (the ACR of a memorized canary only needs
# to beat the failure convention |y| / cap of a once-seen one).
SEARCH = SearchConfig(
    decide_steps=25, shrink_steps=10, restarts=0, gcg=GCGConfig(top_k=64, num_candidates=48, patience=15)
)


@pytest.fixture(scope="module")
def corpus():
    return build_corpus(SPEC)


@pytest.fixture(scope="module")
def study_engine(corpus, tmp_path_factory):
    import torch

    from scanner.engine.hf import HFEngine
    from scanner.engine.loading import load_model

    # One thread: a model this small gains nothing from two, and on a shared 2-core machine two
    # threads spin against other jobs (several times slower).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("validity")
    train_models(corpus, [SIZE], vocab_size=2048, epochs=8, out_dir=out)
    yield HFEngine(load_model(ModelConfig(model=str(out / "ci"), device="cpu")), PromptConfig())
    torch.set_num_threads(threads)


def test_canaries_are_planted_exactly_count_times_and_held_out_text_never(corpus):
    text = "\n".join(corpus.documents)
    assert [n for _, n in corpus.canaries] == [1, 1, 64, 64]
    for passage, count in corpus.canaries:
        assert text.count(passage) == count
    for passage in corpus.heldout:
        assert passage not in text and passage.isascii()


def test_a_character_budget_too_small_for_the_copies_still_gives_enough_documents():
    # The background's document lengths depend on the installed packages; a budget of a few
    # characters must still plant the 64 copies rather than fail where longer documents come first.
    small = CorpusSpec(counts=(64,), canaries_per_count=1, heldout=1, max_chars=1)
    built = build_corpus(small)
    assert len(built.documents) >= 64
    assert "\n".join(built.documents).count(built.canaries[0][0]) == 64


def test_longest_copy_counts_consecutive_target_tokens_in_the_prompt():
    assert longest_copy([9, 1, 2, 3, 9], [0, 1, 2, 3, 4]) == 3
    assert longest_copy(None, [1, 2]) == 0 and longest_copy([5], [1, 2]) == 0


def test_duplicated_canaries_compress_better_and_random_text_never_does(corpus, study_engine):
    rows = [
        {"model": "ci", **measure_target(study_engine, {"group": "canary", "count": n, "text": t}, SEARCH, 8)}
        for t, n in corpus.canaries
    ]
    rng = random.Random(0)
    rows += [
        {
            "model": "ci",
            **measure_target(
                study_engine,
                {"group": "random", "count": 0, "text": random_control(study_engine, 30, rng)},
                SEARCH,
                8,
            ),
        }
        for _ in range(2)
    ]
    summary = {(s["group"], s["count"]): s for s in summarize(rows)}
    assert summary["canary", 64]["avg_acr"] > summary["canary", 1]["avg_acr"], rows
    assert summary["canary", 64]["memorized"] > 0, rows
    assert summary["random", 0]["memorized"] == 0 and summary["random", 0]["natural"] == 0, rows
