"""Identical spans searched once (scanner/run/units.py): a span's search depends only on its target
tokens, so a text that stands in several documents (here a canary document twice, as a second edition
would) is certified or searched by one copy and every other copy takes its verdict, at no cost of its own,
naming the copy searched (searched_as). Real scans on the tiny model."""

import json
import random
from collections import defaultdict

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from cliopts import FINE_SPANS
from clirun import cli

from scanner.cli.demo import demo_corpus
from scanner.measures import budget as bm
from scanner.results.rows import copied_row
from scanner.schema import default_row
from scanner.studies.tiny import salad

SCAN = FINE_SPANS
VERDICT = (
    "status",
    "memorized",
    "acr",
    "acr_kind",
    "prompt",
    "prompt_ids",
    "prompt_tokens",
    "verified_generation",
)


@pytest.fixture(scope="module")
def twice(tiny_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("copies")
    canary = (
        pq.read_table(demo_corpus(root / "demo.parquet")).column("text")[0].as_py()
    )  # doc-0 holds a canary
    corpus = root / "corpus.parquet"
    pq.write_table(
        pa.table({"id": ["first", "salad", "second"], "text": [canary, salad(random.Random(5), 20), canary]}),
        corpus,
    )
    out = root / "run"
    done = cli("scan", str(corpus), "--model", str(tiny_dir), "--out", str(out), *SCAN)
    assert done.returncode == 0, done.stderr
    return out, pq.read_table(out / "results").to_pylist()


def by_place(rows):
    return {(r["doc_id"], r["token_start"]): r for r in rows}


def test_each_target_is_certified_or_searched_once_and_every_copy_takes_its_verdict(twice):
    out, rows = twice
    places = by_place(rows)
    copies = [r for r in rows if r["searched_as"] is not None]
    decided = [r for r in rows if r["status"] in ("memorized", "not_memorized")]
    assert copies and len(copies) * 2 == len(decided), "one copy of each decided span of the text twice"
    ids = {r["span_id"]: r for r in rows}
    for copy in copies:
        searched = ids[copy["searched_as"]]
        twin = "first" if copy["doc_id"] == "second" else "second"
        assert searched is places[(twin, copy["token_start"])] and searched["searched_as"] is None
        assert {k: copy[k] for k in VERDICT} == {k: searched[k] for k in VERDICT}
        assert copy["steps"] == copy["forwards"] == 0 and copy["search_s"] == 0.0
        assert copy["target_ids"] == searched["target_ids"] and copy["doc_id"] != searched["doc_id"]
    kinds = {r["acr_kind"] for r in copies}
    assert {"certificate_bound", "searched_min"} <= kinds, "certified and searched targets are both shared"


def test_a_copy_carries_the_attempts_and_prompt_measures_of_the_span_searched_and_counts_once(twice):
    from scanner.results.denominators import denominators

    out, rows = twice
    ids = {r["span_id"]: r for r in rows}
    copies = [r for r in rows if r["searched_as"] is not None]
    for copy in copies:
        searched = ids[copy["searched_as"]]
        assert copy["attempts"] == searched["attempts"] and copy["attempts"]
        assert sum(a["steps"] for a in searched["attempts"]) == searched["steps"] and copy["steps"] == 0
        assert copy["prompt_source"] == searched["prompt_source"]
        assert (copy["prompt_source"] is None) == (copy["prompt"] is None)
    counts = denominators(pq.read_table(out / "results"))
    own = [r for r in rows if r["searched_as"] is None]
    assert counts["copies"] == len(copies) and counts["attempts"] == sum(len(r["attempts"]) for r in own)
    assert counts["gcg_steps"] == sum(r["steps"] for r in rows)
    assert (
        counts["settled_by_certificate"] + counts["searched"] == counts["memorized"] + counts["not_memorized"]
    )


def test_the_plans_hold_one_unit_per_distinct_target_and_copies_cost_nothing(twice):
    out, rows = twice
    plans = {
        name: json.loads((out / f"{name}_plan.json").read_text()) for name in ("certify", "search", "tighten")
    }
    planned = {name: [span for unit in plan["units"] for _, span, *_ in unit] for name, plan in plans.items()}
    ids = {r["span_id"]: r for r in rows}
    for name in ("certify", "search"):
        targets = [tuple(ids[span]["target_ids"]) for span in planned[name]]
        assert len(targets) == len(set(targets)), f"a target {name} twice"
    assert not set(planned["certify"]) & set(planned["search"])
    copied = {
        span: rep
        for plan in plans.values()
        for rep, items in plan.get("copies", {}).items()
        for _, span in items
    }
    assert copied == {r["span_id"]: r["searched_as"] for r in rows if r["searched_as"]}
    status = json.loads(cli("status", str(out)).stdout)
    spent = status["phases"]["budget"]["spent"]
    assert spent == sum(r["steps"] for r in rows) == sum(ids[s]["steps"] for s in planned["search"]) > 0


def test_a_copy_takes_what_the_search_changed_and_keeps_its_place_and_screen():
    screen = {
        **default_row(),
        "span_id": "a",
        "doc_id": "d1",
        "token_start": 4,
        "greedy_match_rate": 0.9,
        "screen_s": 0.2,
        "status": "not_searched",
        "reason": "not searched yet",
        "target_ids": [1, 2],
    }
    searched = {
        **screen,
        "status": "memorized",
        "reason": None,
        "prompt": "p",
        "prompt_tokens": 1,
        "acr": 2.0,
        "steps": 30,
        "forwards": 9,
        "search_s": 1.5,
        "calibration_s": 0.3,
    }
    copy = {
        **screen,
        "span_id": "b",
        "doc_id": "d2",
        "token_start": 40,
        "greedy_match_rate": 0.7,
        "screen_s": 0.4,
    }
    row = copied_row(copy, screen, searched)
    assert (row["span_id"], row["doc_id"], row["token_start"], row["greedy_match_rate"], row["screen_s"]) == (
        "b",
        "d2",
        40,
        0.7,
        0.4,
    )
    assert (row["status"], row["prompt"], row["acr"], row["reason"], row["searched_as"]) == (
        "memorized",
        "p",
        2.0,
        None,
        "a",
    )
    assert row["steps"] == row["forwards"] == 0 and row["search_s"] == 0.0
    assert row["calibration_s"] == default_row()["calibration_s"]


def test_copies_of_a_candidate_the_budget_cut_stay_not_searched_with_its_reason(tiny_dir, twice, tmp_path):
    out, _ = twice
    corpus = out.parent / "corpus.parquet"
    cut = tmp_path / "cut"
    done = cli(
        "scan", str(corpus), "--model", str(tiny_dir), "--out", str(cut), *SCAN, "--search-budget", "1steps"
    )
    assert done.returncode == 0, done.stderr
    rows = pq.read_table(cut / "results").to_pylist()
    waiting = defaultdict(list)
    for r in rows:
        if r["status"] == "not_searched":
            waiting[tuple(r["target_ids"])].append(r)
    assert waiting and all(len(group) == 2 for group in waiting.values()), "both copies wait"
    assert all(
        r["searched_as"] is None and "--search-budget 1steps" in r["reason"]
        for group in waiting.values()
        for r in group
    )
    decided = [r for r in rows if r["acr_kind"] in ("searched_min", "decision_bound")]
    assert len(decided) == 2 and len({tuple(r["target_ids"]) for r in decided}) == 1, "one search, two rows"
    assert bm.spent([json.loads(p.read_text()) for p in (cut / "search/stats").glob("*.json")], None) == sum(
        r["steps"] for r in decided
    )
