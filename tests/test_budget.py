"""The search phase's pure math (scanner/measures/budget.py): budget parsing, the evidence order, units, and
the start rule that makes the budget resume-safe."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scanner.errors import InputError
from scanner.measures import budget as bm


@pytest.mark.parametrize(
    "text, kind, amount",
    [
        ("20000steps", "steps", 20000),
        ("5 steps", "steps", 5),
        ("2h", "seconds", 7200),
        ("90m", "seconds", 5400),
        ("3600s", "seconds", 3600),
        ("1.5h", "seconds", 5400),
        ("1STEP", "steps", 1),
    ],
)
def test_budgets_parse(text, kind, amount):
    assert bm.parse_budget(text) == bm.Budget(kind, amount)


@pytest.mark.parametrize("text", ["", "10", "2 days", "-5steps", "0s", "1.5steps", "steps", "h2"])
def test_bad_budgets_name_the_value_and_the_forms(text):
    with pytest.raises(InputError) as err:
        bm.parse_budget(text)
    assert repr(text) in str(err.value) and "'20000steps'" in str(err.value) and "'2h'" in str(err.value)


rows = st.lists(
    st.fixed_dictionaries(
        {
            "target_tokens": st.integers(4, 64),
            "certificate_tokens": st.one_of(st.none(), st.integers(1, 80)),
            "greedy_match_rate": st.one_of(st.none(), st.floats(0, 1)),
            "mean_nll": st.one_of(st.none(), st.floats(0, 20)),
        }
    ),
    max_size=30,
).map(lambda rs: [{**r, "span_id": f"{i:04x}"} for i, r in enumerate(rs)])


@given(rows)
def test_rank_is_a_permutation_ordered_by_bound_then_match_then_nll(candidates):
    ranked = bm.rank(candidates)
    assert sorted(r["span_id"] for r in ranked) == sorted(r["span_id"] for r in candidates)
    for a, b in zip(ranked, ranked[1:], strict=False):
        assert bm.certificate_bound(a) >= bm.certificate_bound(b)
        if bm.certificate_bound(a) == bm.certificate_bound(b):
            assert (a["greedy_match_rate"] or 0) >= (b["greedy_match_rate"] or 0)
    assert bm.rank(list(reversed(candidates))) == ranked, "input (corpus) order never matters"


@given(rows)
def test_only_certificates_shorter_than_the_span_settle(candidates):
    for r in candidates:
        assert bm.settles(r) == (
            r["certificate_tokens"] is not None and r["certificate_tokens"] < r["target_tokens"]
        )


@given(st.lists(st.integers(), max_size=40), st.integers(1, 9))
def test_units_cover_the_order_in_runs_of_the_size(items, size):
    parts = bm.units(items, size)
    assert [x for p in parts for x in p] == items
    assert all(len(p) == size for p in parts[:-1]) and all(1 <= len(p) <= size for p in parts)


@given(st.lists(st.integers(0, 50), max_size=20), st.integers(1, 200), st.integers(0, 19))
def test_the_start_rule_resumes_where_it_stopped(steps, amount, cut):
    """Units start in order while what committed units spent is below the budget; a relaunch that reads
    the first `cut` committed units and goes on starts exactly the units one launch would."""
    budget = bm.Budget("steps", amount)

    def started(costs, spent=0.0):
        out = []
        for cost in costs:
            if not bm.may_start(spent, budget):
                break
            out.append(cost)
            spent += cost
        return out

    once = started(steps)
    first = once[:cut]
    resumed = first + started(steps[len(first) :], bm.spent([{"steps": s} for s in first], budget))
    assert resumed == once
    assert sum(once) - (once[-1] if once else 0) < amount, "the last unit starts below the budget"
    assert bm.spent([{"steps": 3, "search_s": 2.5}], bm.Budget("seconds", 10)) == 2.5


@given(
    st.lists(st.tuples(st.integers(0, 3), st.lists(st.integers(0, 4), min_size=1, max_size=3)), max_size=30)
)
def test_identical_targets_are_searched_once_by_their_best_ranked_copy(spec):
    rows = [
        {"shard": shard, "span_id": f"s{i:02d}", "target_ids": ids} for i, (shard, ids) in enumerate(spec)
    ]
    searched, copies = bm.distinct(rows, bm.target_key)
    keys = [bm.target_key(r) for r in searched]
    assert len(keys) == len(set(keys)) == len({tuple(r["target_ids"]) for r in rows}), "one search per target"
    first = {}
    for row in rows:  # the first in rank order is the one searched
        first.setdefault(tuple(row["target_ids"]), row["span_id"])
    assert [r["span_id"] for r in searched] == list(dict.fromkeys(first.values()))
    by_id = {r["span_id"]: r for r in rows}
    copied = [span for items in copies.values() for _, span in items]
    assert sorted(copied + [r["span_id"] for r in searched]) == sorted(by_id), "every span once"
    for rep, items in copies.items():
        assert all(
            by_id[span]["target_ids"] == by_id[rep]["target_ids"] and shard == by_id[span]["shard"]
            for shard, span in items
        )


def test_targets_settled_elsewhere_are_not_searched_again():
    rows = [
        {"shard": 0, "span_id": "a", "target_ids": [1, 2]},
        {"shard": 1, "span_id": "b", "target_ids": [3]},
    ]
    searched, copies = bm.distinct(rows, bm.target_key, known={bm.target_key(rows[0]): "certified"})
    assert [r["span_id"] for r in searched] == ["b"] and copies == {"certified": [[0, "a"]]}
    assert bm.target_key({"target_ids": [1, 23]}) != bm.target_key({"target_ids": [12, 3]})


@given(st.floats(0, 1000), st.floats(1, 1000), st.integers(1, 16))
def test_a_seconds_budget_is_a_deadline_that_the_workers_spend_together(spent, amount, workers):
    """What is left of a seconds budget, shared by the workers that spend it at once (the budget sums their
    seconds); never in the past of now; none for a steps budget, which is checked between units only."""
    now = 1_000_000.0
    deadline = bm.deadline(spent, bm.Budget("seconds", amount), workers, now)
    assert deadline == now + max(0.0, amount - spent) / workers and deadline >= now
    assert bm.deadline(spent, bm.Budget("steps", amount), workers, now) is None
    assert bm.deadline(spent, None, workers, now) is None


def _span(name: str, doc: int, start: int, rate: float) -> dict:
    return {
        "span_id": name,
        "doc_row": doc,
        "token_start": start,
        "token_end": start + 32,
        "target_tokens": 32,
        "greedy_match_rate": rate,
        "mean_nll": 1.0,
        "certificate_tokens": None,
    }


def test_every_passage_gets_its_first_search_before_any_gets_a_second():
    """Three touching windows of one passage (doc 0) rank above a lone window elsewhere (doc 1): the lone
    one is searched second, not fourth; a window after a gap starts a run of its own."""
    spans = [
        _span("a1", 0, 0, 0.97),
        _span("a2", 0, 32, 0.96),
        _span("a3", 0, 64, 0.95),
        _span("b", 1, 0, 0.91),
        _span("c", 0, 200, 0.5),
    ]
    order, waits = bm.fresh_first(bm.rank(spans), found=[])
    assert [r["span_id"] for r in order] == ["a1", "b", "c", "a2", "a3"]
    assert waits == set()


def test_a_passage_certificates_found_waits_behind_every_passage_not_yet_found():
    """The case the rule is for: the best candidate (0.97) touches a certified span, so a 0.91 candidate of a
    passage nobody found goes first, and the known run's windows are named as waiting."""
    spans = [_span("known", 0, 32, 0.97), _span("fresh", 1, 0, 0.91), _span("fresh2", 1, 32, 0.6)]
    order, waits = bm.fresh_first(bm.rank(spans), found=[(0, 0, 32)])
    assert [r["span_id"] for r in order] == ["fresh", "fresh2", "known"]
    assert waits == {"known"}
    _, none = bm.fresh_first(bm.rank(spans), found=[(0, 100, 132), (5, 0, 32)])  # beside no candidate
    assert none == set()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.integers(0, 10), st.floats(0, 1)),
        min_size=1,
        max_size=30,
        unique_by=lambda t: (t[0], t[1]),
    ),
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 10)), max_size=4),
)
def test_fresh_first_reorders_and_never_drops(cells, found):
    spans = [_span(f"s{d}-{k}", d, 32 * k, rate) for d, k, rate in cells]
    ranked = bm.rank(spans)
    order, waits = bm.fresh_first(ranked, [(d, 32 * k, 32 * k + 32) for d, k in found])
    assert sorted(r["span_id"] for r in order) == sorted(r["span_id"] for r in spans)
    known = [i for i, r in enumerate(order) if r["span_id"] in waits]
    assert known == list(range(len(order) - len(known), len(order))), "known runs come last"
    fresh = [r["span_id"] for r in ranked if r["span_id"] not in waits]
    if fresh:  # the best candidate not yet known is searched first
        assert order[0]["span_id"] == fresh[0]
