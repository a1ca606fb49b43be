"""Early rejection: the pure decision rule, and the search with it on the tiny memorizing model."""

import json
import random
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scanner.config import GCGConfig, RejectRule, SearchConfig
from scanner.search.miniprompt import measure, measure_many
from scanner.search.reject import HOPELESS, STALLED, decide
from scanner.search.request import SearchRequest
from scanner.search.schedule import make_schedule
from scanner.studies.tiny import CANARIES, salad

rules = st.builds(RejectRule, after=st.integers(1, 20), min_right=st.floats(0, 1), stall=st.integers(0, 30))


@st.composite
def trajectories(draw):
    tokens = draw(st.integers(1, 40))
    rights = draw(st.lists(st.integers(0, tokens), max_size=60))
    return tokens, rights


@given(trajectories(), rules)
def test_nothing_stops_before_after_steps(case, rule):
    tokens, rights = case
    if len(rights) < rule.after:
        assert decide(rights, tokens, rule) is None


@given(trajectories(), rules)
def test_hopeless_exactly_when_the_best_count_stays_below_the_bar(case, rule):
    tokens, rights = case
    verdict = decide(rights, tokens, rule)
    low = bool(rights) and max(rights) < rule.min_right * tokens
    assert (verdict == HOPELESS) == (len(rights) >= rule.after and low)


@given(trajectories(), rules)
def test_stalled_exactly_when_the_best_count_was_last_raised_stall_steps_ago(case, rule):
    tokens, rights = case
    verdict = decide(rights, tokens, rule)
    if verdict != STALLED:
        return
    best = max(rights)
    assert rule.stall > 0 and best < tokens and len(rights) >= rule.after
    assert len(rights) - 1 - rights.index(best) >= rule.stall


@given(trajectories(), rules, st.integers(0, 40))
def test_more_tokens_right_never_makes_a_stop_sooner(case, rule, extra):
    """A step whose count beats every earlier one never turns 'go on' into a stop."""
    tokens, rights = case
    if decide(rights, tokens, rule) is None and rights:
        better = min(tokens, max(rights) + 1 + extra)
        assert decide([*rights, better], tokens, rule) is None or better < rule.min_right * tokens


def test_a_target_written_whole_is_never_rejected():
    rule = RejectRule(after=1, min_right=1.0, stall=1)
    assert decide([5] * 50, 5, rule) is None
    assert decide([4] * 50, 5, rule) == HOPELESS
    assert decide([4] * 50, 5, RejectRule(after=1, min_right=0.5, stall=10)) == STALLED


def test_config_names_bad_values_and_paper_turns_the_rule_off():
    for bad in ({"reject_after": 0}, {"reject_min_right": 1.5}, {"reject_stall": -1}):
        with pytest.raises(Exception, match=next(iter(bad))):
            SearchConfig(**bad)
    assert SearchConfig.paper().reject_rule() is None
    assert SearchConfig(early_reject=False).reject_rule() is None


@given(st.integers(1, 60), st.integers(0, 80), st.booleans(), st.sampled_from(["fast", "paper"]))
def test_the_rule_may_stop_only_attempts_before_a_success(y, found_at, bound, schedule):
    """Never a memorized target's descent, never under bound_unmemorized (which asks for that budget)."""
    config = SearchConfig(schedule=schedule, bound_unmemorized=bound)
    plan = make_schedule(y, 5 * y, config, has_template=True)
    found = False
    while (attempt := plan.next()) is not None:
        if attempt.warm != "none":  # n = 0: nothing is optimized, nothing to stop
            assert attempt.may_reject == (not found and not (bound and schedule == "fast"))
        ok = attempt.length >= found_at
        found = found or ok
        plan.report(ok)


# Small budgets (a short descent for canaries; the rule off costs every step on unseen text).
SMALL = SearchConfig(
    decide_steps=20,
    shrink_steps=5,
    restarts=0,
    reject_after=3,
    gcg=GCGConfig(top_k=64, num_candidates=32, patience=40),
)
ON, OFF = (SearchConfig(**{**SMALL.__dict__, "early_reject": flag}) for flag in (True, False))
UNSEEN = salad(random.Random(11), 8)


@pytest.fixture(scope="module")
def unseen_full(engine):
    return measure(engine, UNSEEN, OFF)


def test_a_memorized_canary_is_found_with_the_rule_on(engine):
    result = measure(engine, CANARIES[1], ON)
    assert result.memorized and result.verified_generation and not result.rejected_early
    assert not any(t["rejected_early"] for t in result.trace)


def test_unseen_text_is_rejected_early_for_far_fewer_forwards(engine, unseen_full):
    full, early = unseen_full, measure(engine, UNSEEN, ON)
    assert not full.memorized and not full.rejected_early
    assert not early.memorized and not early.success and early.rejected_early
    assert early.acr == full.acr == pytest.approx(early.target_tokens / early.cap)
    assert early.trace[-1]["rejected_early"] == HOPELESS
    assert 0 < early.forwards * 5 <= full.forwards and 0 < early.steps * 5 <= full.steps
    # the trajectory: per step, the best loss so far and the target tokens right
    step = early.trace[-1]
    assert len(step["losses"]) == len(step["rights"]) == len(step["top_rights"]) == step["steps"] == 3
    assert max(step["top_rights"]) < ON.reject_min_right * early.target_tokens


def test_the_rule_works_per_target_when_targets_share_forwards(engine, unseen_full):
    results = dict(measure_many(engine, [(SearchRequest(t), ON) for t in (CANARIES[0], UNSEEN)], width=2))
    assert [results[i].memorized for i in range(2)] == [True, False]
    assert [results[i].rejected_early for i in range(2)] == [False, True]
    assert 0 < results[1].forwards * 5 <= unseen_full.forwards


def test_acr_json_carries_rejected_early(tiny_dir):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "scanner",
            "acr",
            "--model",
            str(tiny_dir),
            "--json",
            "--steps",
            "20",
            "--candidates",
            "32",
            "--restarts",
            "0",
            "--early-reject",
            "--reject-after",
            "3",
            UNSEEN,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    record = json.loads(out.stdout.strip().splitlines()[-1])
    assert not record["memorized"] and record["rejected_early"] is True and record["steps"] == 3
