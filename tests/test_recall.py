"""The audit's estimator (scanner/measures/recall.py): exact hypergeometric intervals that hold the truth at
their stated rate, a zero-hit sample's upper bound, and the stratified draw."""

import math
import random

import pytest

from scanner.errors import InputError
from scanner.measures.recall import (
    Stratum,
    allocate,
    draw,
    estimate,
    exact_interval,
    hypergeom_cdf,
    hypergeom_pmf,
    strata_by_score,
)


def test_the_hypergeometric_sums_to_one_and_matches_a_count_by_hand():
    assert math.isclose(sum(hypergeom_pmf(x, 30, 7, 10) for x in range(11)), 1.0)
    # 2 marked of 5, draw 2: P(0) = C(3,2)/C(5,2) = 3/10, P(1) = 2*3/10, P(2) = 1/10
    assert [round(hypergeom_pmf(x, 5, 2, 2), 10) for x in range(3)] == [0.3, 0.6, 0.1]
    assert math.isclose(hypergeom_cdf(1, 5, 2, 2), 0.9)


def test_a_census_is_exact_and_a_clean_sample_bounds_the_rest():
    assert exact_interval(0, 50, 50, 0.05) == (0, 0)  # every span searched: nothing can hide
    assert exact_interval(3, 50, 50, 0.05) == (3, 3)
    lo, hi = exact_interval(0, 100, 1000, 0.05)
    assert lo == 0
    # the largest K that a clean sample of 100 of 1000 still allows at 2.5 %: P(X = 0 | K) > 0.025 at hi
    assert hypergeom_pmf(0, 1000, hi, 100) > 0.025 >= hypergeom_pmf(0, 1000, hi + 1, 100)
    assert 25 <= hi <= 40  # near the rule of three's 30 (3 / 100 of 1000), tighter for the finite population


@pytest.mark.parametrize("total,marked,drawn", [(400, 0, 40), (400, 3, 40), (400, 20, 60), (120, 30, 12)])
def test_the_interval_holds_the_truth_at_its_stated_rate(total, marked, drawn):
    rng = random.Random(total * 7 + marked)
    population = [True] * marked + [False] * (total - marked)
    trials, held = 1000, 0
    for _ in range(trials):
        hits = sum(rng.sample(population, drawn))
        lo, hi = exact_interval(hits, drawn, total, 0.05)
        held += lo <= marked <= hi
    assert held / trials >= 0.95 - 0.015, held  # exact intervals are conservative: at least the stated rate


def test_strata_combine_into_a_total_that_holds_the_truth():
    rng = random.Random(1)
    truth = {"top": (20, 6), "next": (80, 4), "rest": (900, 2)}  # (size, memorized) per stratum
    held = 0
    for _ in range(300):
        strata = []
        for name, (size, marked) in truth.items():
            drawn = min(size, 15)
            hits = sum(rng.sample([True] * marked + [False] * (size - marked), drawn))
            strata.append(Stratum(name, size, drawn, hits))
        got = estimate(strata)
        missed = sum(m for _, m in truth.values()) - got["hits"]
        held += got["missed_low"] <= missed <= got["missed_high"]
        assert got["drawn"] == 45 and got["missed_low"] <= got["missed"] <= got["missed_high"]
    assert held / 300 >= 0.95


def test_a_clean_audit_says_zero_with_an_upper_bound():
    got = estimate([Stratum("not_searched", 200, 20, 0), Stratum("screened_out", 5000, 30, 0)])
    assert got["missed"] == 0 and got["missed_low"] == 0 and got["missed_high"] > 0
    assert "exact hypergeometric" in got["method"]
    assert [r["stratum"] for r in got["strata"]] == ["not_searched", "screened_out"]


def test_the_draw_is_seeded_stratified_and_never_exceeds_a_stratum():
    assert allocate([2, 10, 100], 30) == [2, 10, 18]  # small strata are taken whole, their leftover passed on
    assert allocate([50, 50, 50], 30) == [10, 10, 10]
    assert allocate([2, 3], 50) == [2, 3] and allocate([5, 5], 0) == [0, 0]
    ids = [f"s{i}" for i in range(100)]
    strata = strata_by_score(ids, [float(i) for i in range(100)])
    assert [len(s) for s in strata] == [5, 20, 75] and strata[0] == ["s99", "s98", "s97", "s96", "s95"]
    first, again = draw(strata, 12, seed=3), draw(strata, 12, seed=3)
    assert first == again and [len(s) for s in first] == [4, 4, 4]
    assert all(set(d) <= set(s) for d, s in zip(first, strata, strict=True))
    assert draw(strata, 12, seed=4) != first
    with pytest.raises(InputError, match="--audit-sample -1"):
        allocate([1], -1)


def test_the_audit_size_follows_the_search_it_audits():
    from scanner.config import AuditRule, parse_audit
    from scanner.measures.recall import AUDIT_MAX, audit_size, search_cost

    assert parse_audit(16) == parse_audit("16") == AuditRule("count", 16) and parse_audit("0").amount == 0
    assert parse_audit("25%") == AuditRule("share", 0.25) and parse_audit("10m") == AuditRule("seconds", 600)
    for bad in ("-1", "x", "0%", "10steps", "2.5", True):
        with pytest.raises(InputError, match="--audit-sample"):
            parse_audit(bad)
    # Two memorized searches (cheap) and two refuted ones: an audit search is priced at the refuted ones.
    units = [
        {
            "search_s": 30.0,
            "cost": {
                "outcomes": {
                    "memorized": {"candidates": 2, "seconds": 4.0},
                    "not_memorized": {"candidates": 1, "seconds": 10.0},
                }
            },
        },
        {"search_s": 12.0, "cost": {"outcomes": {"rejected_early": {"candidates": 1, "seconds": 6.0}}}},
    ]
    cost = search_cost(units)
    assert cost["spent_s"] == 42 and cost["searches"] == 4 and cost["per_search_s"] == 8
    assert audit_size(parse_audit("25%"), cost)[0] == 1  # 10.5 s at 8 s a search
    assert audit_size(parse_audit("1m"), cost)[0] == 7 and audit_size(parse_audit("10"), cost)[0] == 10
    assert audit_size(parse_audit("1000%"), cost)[0] == 52  # 420 s at 8 s a search
    size, why = audit_size(parse_audit("1h"), cost)
    assert size == AUDIT_MAX and f"at most {AUDIT_MAX}" in why
    nothing = search_cost([])
    assert nothing["per_search_s"] is None and audit_size(parse_audit("25%"), nothing)[0] == 0
    size, why = audit_size(parse_audit("10m"), nothing)
    assert size == 0 and "no search measured" in why
    found = [{"search_s": 5.0, "cost": {"outcomes": {"memorized": {"candidates": 2, "seconds": 4.0}}}}]
    assert search_cost(found)["per_search_s"] == 2, "none refuted: priced at every search"
