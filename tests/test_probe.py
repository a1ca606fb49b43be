"""Probe sampling: a draft model of the target's tokenizer screens GCG's candidates. The
rule's math, the draft's refusal before anything is written, and searches on the tiny model: the same
verdict with a draft, fewer target forwards, and never a false "memorized" from a draft that knows
nothing (the verdict is still the target's greedy generation)."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scanner.config import DraftConfig, EngineConfig, ModelConfig, PromptConfig, SearchConfig
from scanner.errors import InputError
from scanner.measures.probe import agreement, filtered_size, probe_size, ranks, spearman
from scanner.search.miniprompt import measure
from scanner.studies.tiny import CANARIES, salad


def test_spearman_is_one_for_the_same_order_and_minus_one_for_the_reverse():
    assert spearman([1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 30.0, 40.0]) == pytest.approx(1.0)
    assert spearman([1.0, 2.0, 3.0, 4.0], [4.0, 3.0, 2.0, 1.0]) == pytest.approx(-1.0)
    assert spearman([1.0, 2.0, 3.0], [1.0, 3.0, 2.0]) == pytest.approx(0.5)  # 1 - 6 * 2 / (3 * 8)


def test_ties_share_their_mean_rank_and_a_constant_side_gives_no_evidence():
    assert ranks([0.0, 0.0, 1.0, 0.5]) == [1.5, 1.5, 4.0, 3.0]
    assert spearman([0.0, 0.0, 0.0], [1.0, 2.0, 3.0]) == 0.0  # all margins met: the target cannot rank
    assert spearman([1.0], [2.0]) == 0.0
    with pytest.raises(ValueError, match="spearman of 2 and 3 values"):
        spearman([1.0, 2.0], [1.0, 2.0, 3.0])


@given(st.lists(st.tuples(st.floats(-5, 5), st.floats(-5, 5)), min_size=2, max_size=30))
def test_spearman_is_bounded_and_symmetric(pairs):
    a, b = [x for x, _ in pairs], [y for _, y in pairs]
    rho = spearman(a, b)
    assert -1.0 <= rho <= 1.0
    assert rho == pytest.approx(spearman(b, a))


def test_the_filtered_set_grows_as_draft_and_target_disagree():
    assert agreement(1.0) == 1.0 and agreement(-1.0) == 0.0
    assert filtered_size(256, 1.0, 8.0) == 1  # full agreement: the draft's best alone
    assert filtered_size(256, 0.0, 8.0) == 16  # (1 - 1/2) * 256 / 8
    assert filtered_size(256, -1.0, 8.0) == 32
    assert filtered_size(256, 0.9, 8.0, min_kept=8) == 8
    assert filtered_size(10, -1.0, 0.5) == 10  # never more than the candidates
    assert probe_size(256, 16) == 16 and probe_size(10, 16) == 10


def test_a_bad_rule_is_refused_naming_the_option():
    with pytest.raises(InputError, match="--probe-size 1 must be >= 2"):
        DraftConfig(probe_size=1)
    with pytest.raises(InputError, match="--probe-reduction 0.0 must be a number > 0"):
        DraftConfig(reduction=0.0)


def _copy_model(tiny_dir, where):
    shutil.copytree(tiny_dir, where, ignore=shutil.ignore_patterns("demo-scan", "*.lock"))
    return where


@pytest.fixture(scope="module")
def other_tokenizer(tiny_dir, tmp_path_factory):
    """The tiny model with a tokenizer trained on other text: ids mean other tokens."""
    from scanner.studies.tiny import train_tokenizer

    where = _copy_model(tiny_dir, tmp_path_factory.mktemp("other") / "model")
    train_tokenizer([salad(random.Random(i), 60) for i in range(50)], 300).save_pretrained(where)
    return where


@pytest.fixture(scope="module")
def random_draft(tiny_dir, tmp_path_factory):
    """A draft of the tiny model's shape and tokenizer with random weights: it knows nothing."""
    import torch
    from transformers import AutoConfig, AutoTokenizer, LlamaForCausalLM

    where = tmp_path_factory.mktemp("random") / "model"
    torch.manual_seed(0)
    LlamaForCausalLM(AutoConfig.from_pretrained(tiny_dir)).save_pretrained(where)
    AutoTokenizer.from_pretrained(tiny_dir).save_pretrained(where)
    return where


def test_a_draft_of_another_tokenizer_is_refused_before_the_run_directory_exists(
    tiny_dir, other_tokenizer, tmp_path
):
    from scanner.cli.demo import demo_corpus

    corpus, out = demo_corpus(tmp_path / "corpus.parquet"), tmp_path / "run"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "scanner",
            "scan",
            str(corpus),
            "--model",
            str(tiny_dir),
            "--out",
            str(out),
            "--draft-model",
            str(other_tokenizer),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    assert (
        f"--draft-model {other_tokenizer}: its tokenizer is not the one of --model {tiny_dir}" in done.stderr
    )
    assert "tokens differ" in done.stderr and "leave --draft-model out" in done.stderr
    assert not out.exists()


def _with_draft(engine, draft_dir):
    """The session's engine with `draft_dir` attached (detached again by the caller)."""
    from scanner.engine.draft import attach_draft

    attach_draft(engine, ModelConfig(model="unused", device="cpu"), str(draft_dir), PromptConfig())
    return engine


@pytest.fixture
def drafted(engine):
    yield lambda draft_dir: _with_draft(engine, draft_dir)
    engine.draft, engine.draft_name, engine.draft_load_s = None, None, 0.0


def _drafted_config(config: SearchConfig, draft_dir, **rule) -> SearchConfig:
    return replace(config, gcg=replace(config.gcg, draft=DraftConfig(model=str(draft_dir), **rule)))


def test_a_draft_reaches_the_same_verdict_with_fewer_target_forwards(engine, tiny_dir, drafted, fast_config):
    config = replace(fast_config, verdict_only=True, try_empty=False)
    alone = measure(engine, CANARIES[1], config)
    drafted(tiny_dir)  # the model as its own draft: agreement is perfect
    result = measure(
        engine, CANARIES[1], _drafted_config(config, tiny_dir, probe_size=16, reduction=8.0, min_kept=1)
    )
    assert alone.memorized and result.memorized and result.verified_generation
    assert result.draft_forwards > 0 and result.draft_s > 0
    scored = sum(a["scored"] for a in result.trace)
    sampled = sum(a["sampled"] for a in result.trace)
    assert scored < sampled / 3  # the probe and the draft's best only
    assert all(rho > 0.9 for a in result.trace for rho in a["agreement"])
    assert result.stages["deciding"]["draft_forwards"] == result.draft_forwards


def test_a_random_draft_never_makes_a_false_memorized(engine, random_draft, drafted, fast_config):
    drafted(random_draft)
    config = _drafted_config(
        replace(fast_config, decide_steps=20, restarts=0, verdict_only=True), random_draft
    )
    unseen = measure(engine, salad(random.Random(5), 8), config)
    assert not unseen.memorized and not unseen.success
    found = measure(engine, CANARIES[0], config)  # weaker, perhaps: but any success is verified by generation
    assert not found.success or (
        found.verified_generation and engine.verify(found.prompt, found.target_ids).verified_generation
    )
    assert unseen.draft_forwards > 0


def test_a_search_configured_with_a_draft_the_engine_lacks_fails_loudly(engine, tiny_dir, fast_config):
    with pytest.raises(ValueError, match="asks for the draft model"):
        measure(engine, CANARIES[0], _drafted_config(fast_config, tiny_dir))


def test_build_engines_attaches_the_draft_and_records_its_load(tiny_dir):
    from scanner.engine.build import build_engines

    built = build_engines(
        ModelConfig(model=str(tiny_dir), device="cpu"),
        PromptConfig(),
        EngineConfig(verify="hf", screen="hf"),
        draft=str(tiny_dir),
    )
    assert built.draft is not None and built.draft_name == str(tiny_dir) and built.draft_load_s > 0
    assert built.draft.model is not built.model


def test_a_changed_draft_is_a_changed_configuration_on_resume(tiny_dir):
    from scanner.config import CorpusConfig, GCGConfig, ScanConfig
    from scanner.storage.rundir import _config_problems

    def scan(draft: str | None) -> dict:
        search = SearchConfig(gcg=GCGConfig(draft=DraftConfig(model=draft)))
        return ScanConfig(
            corpus=CorpusConfig(path="c"), model=ModelConfig(model="m"), search=search
        ).to_dict()

    saved = {
        "config": json.loads(json.dumps(scan(str(tiny_dir)))),
        "corpus_fingerprint": "f",
        "docs_per_shard": 8,
    }
    assert _config_problems(saved, scan(str(tiny_dir)), "f", 8, None)[0] == ""  # the same draft resumes
    problem, _ = _config_problems(saved, scan("other-draft"), "f", 8, None)
    assert "search.gcg.draft.model" in problem and "other-draft" in problem
    assert "search.gcg.draft.model" in _config_problems(saved, scan(None), "f", 8, None)[0]


def test_a_scan_with_a_draft_records_it_and_resumes(tiny_dir, tmp_path):
    from scanner.cli.demo import demo_corpus

    corpus, out = demo_corpus(tmp_path / "corpus.parquet"), tmp_path / "run"
    scan = [
        sys.executable,
        "-m",
        "scanner",
        "scan",
        str(corpus),
        "--model",
        str(tiny_dir),
        "--out",
        str(out),
        "--span-tokens",
        "12",
        "--stride",
        "2",
        "--context-tokens",
        "0",
        "--docs-per-shard",
        "3",
        "--min-match-rate",
        "0.5",
        "--steps",
        "40",
        "--candidates",
        "64",
        "--top-k",
        "64",
        "--restarts",
        "0",
        "--max-candidates",
        "2",
        "--search-budget",
        "5steps",
        "--no-anchors",
        "--extend-tokens",
        "0",
        "--calibration-prompts",
        "0",
        "--probe-size",
        "8",
        "--probe-min-kept",
        "1",
        "--draft-model",
        str(tiny_dir),
    ]
    first = subprocess.run(scan, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr
    provenance = json.loads((out / "provenance.json").read_text())
    assert provenance["draft_model"] == str(tiny_dir) and float(provenance["draft_load_s"]) > 0
    stats = [json.loads(p.read_text()) for p in (out / "search").rglob("*.json") if "stats" in p.parts]
    assert stats and sum(s["cost"]["stages"]["deciding"].get("draft_forwards", 0) for s in stats) > 0
    again = subprocess.run(scan, capture_output=True, text=True, timeout=600)  # the same draft: resumes
    assert again.returncode == 0, again.stderr
    changed = subprocess.run(scan[:-2], capture_output=True, text=True, timeout=600)
    assert changed.returncode == 2 and "search.gcg.draft.model" in changed.stderr
