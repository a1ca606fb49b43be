"""The length search as a state machine, driven by scripted oracles instead of a model."""

from hypothesis import given, settings
from hypothesis import strategies as st

from scanner.config import SearchConfig
from scanner.measures.acr import decision_length
from scanner.search.schedule import FastSchedule, PaperSchedule, make_schedule


def drive(schedule, succeeds):
    tried = []
    while (attempt := schedule.next()) is not None:
        tried.append(attempt)
        schedule.report(succeeds(attempt.length))
        assert len(tried) < 10_000
    return tried


def reference_paper(y, succeeds, start=5, steps=200):
    """The authors' loop, transcribed independently: the order of lengths and step budgets."""
    n, hi, lo, out = start, 5 * y, 0, []
    while True:
        out.append((n, steps))
        if succeeds(n):
            hi, nxt = n, n - 1
        else:
            lo, nxt, steps = n, n + 5, int(steps * 1.2)
        if nxt >= hi or nxt <= lo:
            return out, hi
        n = nxt


def test_paper_order_on_a_scripted_oracle():
    # succeeds from 13 tokens on: 5 x, 10 x, 15 ok, 14 ok, 13 ok, 12 x -> stop at floor? no: floor is 10
    tried = drive(PaperSchedule(5 * 20, SearchConfig.paper()), lambda n: n >= 13)
    assert [(a.length, a.steps) for a in tried] == [
        (5, 200),
        (10, 240),
        (15, 288),
        (14, 288),
        (13, 288),
        (12, 288),
    ]


@settings(max_examples=300)
@given(st.integers(1, 60), st.sets(st.integers(0, 300)))
def test_paper_schedule_matches_the_reference_for_any_oracle(y, good):
    schedule = PaperSchedule(5 * y, SearchConfig.paper())
    tried = drive(schedule, lambda n: n in good)
    expected, hi = reference_paper(y, lambda n: n in good)
    assert [(a.length, a.steps) for a in tried] == expected
    assert schedule.hi == hi
    assert schedule.found == any(n in good for n, _ in expected)


@settings(max_examples=300)
@given(st.integers(1, 80), st.integers(0, 400), st.floats(0.25, 4), st.booleans())
def test_fast_schedule_finds_the_boundary_of_a_monotone_oracle(y, k, tau, template):
    config = SearchConfig(tau=tau)
    cap = 5 * y
    schedule = FastSchedule(y, cap, config, has_template=template)
    tried = drive(schedule, lambda n: n >= k)
    lengths = [a.length for a in tried]
    assert len(lengths) == len(set(lengths)), "no length is tried twice"
    assert all(0 <= n < cap for n in lengths)
    n_d = min(decision_length(y, tau), cap - 1)
    empty = k == 0 and template  # the template alone elicits the target
    reachable = empty or (max(k, 1) <= n_d)
    assert schedule.found == reachable
    if reachable:
        assert schedule.hi == (0 if empty else max(k, 1))
    if template and lengths:
        assert lengths[0] == 0  # the template alone is always tried first


def test_fast_schedule_decides_at_the_decision_length_first():
    tried = drive(FastSchedule(32, 160, SearchConfig(probe_length=0), has_template=False), lambda n: False)
    assert [a.length for a in tried] == [31]
    assert tried[0].tries == 1 + SearchConfig().restarts


def test_a_short_probe_comes_before_the_decision_length():
    # Unmemorized: one try at 5 tokens, then the decision length with its restarts, fresh as without a probe.
    tried = drive(FastSchedule(32, 160, SearchConfig(), has_template=True), lambda n: False)
    assert [(a.length, a.tries, a.warm) for a in tried] == [
        (0, 1, "none"),
        (5, 1, "random"),
        (31, 1 + SearchConfig().restarts, "random"),
    ]
    # Memorized: the probe proves ACR > tau and the descent starts below it; the decision length is skipped.
    schedule = FastSchedule(32, 160, SearchConfig(), has_template=False)
    assert [a.length for a in drive(schedule, lambda n: n >= 3)] == [5, 4, 3, 2]
    assert schedule.found and schedule.hi == 3
    # No probe at or above the decision length.
    assert [
        a.length for a in drive(FastSchedule(5, 25, SearchConfig(), has_template=False), lambda n: False)
    ] == [4]


def test_fast_schedule_descends_with_warm_starts_after_a_success():
    tried = drive(FastSchedule(10, 50, SearchConfig(probe_length=0), has_template=True), lambda n: n >= 6)
    assert [a.length for a in tried] == [0, 9, 8, 7, 6, 5]
    assert [a.warm for a in tried] == ["none", "random", "shrink", "shrink", "shrink", "shrink"]


@given(st.integers(2, 60), st.integers(1, 100))
def test_a_certificate_bounds_the_search(y, certificate):
    schedule = make_schedule(y, 5 * y, SearchConfig(), has_template=False, known_length=certificate)
    tried = drive(schedule, lambda n: False)
    assert schedule.found and schedule.hi == min(certificate, 5 * y)
    assert all(a.length < schedule.hi for a in tried)


@settings(max_examples=300)
@given(st.integers(1, 80), st.integers(1, 400))
def test_bounding_unmemorized_text_finds_the_boundary_up_to_the_cap(y, k):
    cap = 5 * y
    schedule = FastSchedule(y, cap, SearchConfig(bound_unmemorized=True), has_template=False)
    tried = drive(schedule, lambda n: n >= k)
    lengths = [a.length for a in tried]
    assert len(lengths) == len(set(lengths)) and all(0 < n < cap for n in lengths)
    assert schedule.found == (k < cap)
    if k < cap:
        assert schedule.hi == k
    grows = [a for a in tried[1:] if a.length > decision_length(y, 1.0)]  # after a failed prompt exists
    assert all(a.warm in ("grow", "shrink") for a in grows)


@settings(max_examples=300)
@given(st.integers(1, 80), st.integers(0, 400), st.floats(0.25, 4), st.booleans(), st.integers(0, 8))
def test_a_schedule_resumed_at_its_decided_length_goes_on_as_the_uninterrupted_one(
    y, k, tau, template, probe
):
    """The scan decides every candidate (stopping at the first success) before it shrinks any: the
    shrinking search, resumed from the decided length, tries what the one-pass search would have."""
    config = SearchConfig(tau=tau, probe_length=probe)
    whole = drive(FastSchedule(y, 5 * y, config, has_template=template), lambda n: n >= k)
    first = next((i for i, a in enumerate(whole) if a.length >= k), None)
    if first is None:
        return  # nothing succeeded: the verdict is the whole search, nothing to shrink
    resumed = drive(
        make_schedule(y, 5 * y, config, has_template=template, decided_length=whole[first].length),
        lambda n: n >= k,
    )
    assert resumed == whole[first + 1 :]


def test_the_paper_schedule_resumes_with_its_compounded_step_budget():
    whole = drive(PaperSchedule(5 * 20, SearchConfig.paper()), lambda n: n >= 13)  # 5 x, 10 x, 15 ok, ...
    resumed = drive(
        make_schedule(20, 100, SearchConfig.paper(), has_template=False, decided_length=15), lambda n: n >= 13
    )
    assert resumed == whole[3:] and resumed[0].steps == 288


def test_a_length_the_schedule_never_tries_is_refused():
    import pytest

    with pytest.raises(ValueError, match="never tries length 7"):
        make_schedule(20, 100, SearchConfig.paper(), has_template=False, decided_length=7)
