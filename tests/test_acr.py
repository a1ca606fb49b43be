import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scanner.measures import acr


@given(st.integers(1, 10_000), st.integers(0, 10_000), st.integers(1, 50_000))
def test_acr_is_target_over_prompt_with_documented_conventions(y, x, cap):
    assert acr.acr(y, x, cap) == y / max(x, 1)
    assert acr.acr(y, None, cap) == y / cap


@given(st.integers(1, 5000), st.floats(0.05, 20))
def test_decision_length_is_the_longest_prompt_that_proves_memorization(y, tau):
    n = acr.decision_length(y, tau)
    assert n >= 0
    if n > 0:
        assert y / n > tau
    assert y / (n + 1) <= tau + 1e-9


@given(st.floats(0, 100), st.floats(0.01, 10), st.booleans())
def test_failures_are_never_memorized(value, tau, success):
    assert acr.is_memorized(value, tau, success) == (success and value > tau)


def test_aggregate_counts_failures_in_the_average_and_never_as_memorized():
    rows = [(4.0, True, True), (0.2, False, False), (0.5, False, True), (3.0, True, False)]
    agg = acr.aggregate(rows)
    assert agg.count == 4
    assert math.isclose(agg.average_acr, (4.0 + 0.2 + 0.5 + 3.0) / 4)
    assert agg.portion_memorized == 0.25  # the "memorized" failure row does not count
    assert agg.failures == 2


def test_threshold_flags():
    flags = acr.threshold_flags(2.0, True, {"tau": 1.0, "gzip": 2.5})
    assert flags == {"tau": {"tau": 1.0, "memorized": True}, "gzip": {"tau": 2.5, "memorized": False}}


@pytest.mark.parametrize("args", [(0, 1, 5), (3, -1, 5), (3, 1, 0)])
def test_bad_values_raise(args):
    with pytest.raises(ValueError):
        acr.acr(*args)
