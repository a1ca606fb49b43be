"""`acr-scan plan`: screen the corpus (or a seeded sample of its documents), search a systematic sample
of the candidates the scan would search, project the whole scan (scanner/run/plan.py,
scanner/measures/plan.py). Through the CLI on the tiny model and ten short documents (two canaries in
word salad, eight of salad alone); the projection is checked against the real scan of the whole corpus
with the same options, and the pure projection math on its own."""

from __future__ import annotations

import json
import math
import random
import re
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from clirun import cli
from hypothesis import given
from hypothesis import strategies as st

from scanner.errors import InputError
from scanner.measures import plan as pm
from scanner.studies.tiny import CANARIES, salad

# Exact windows: the first canary's best candidate then has a certificate as long as the span (not
# shorter, so GCG searches it and the projection gets memorized-search figures; certificates are tried
# that long only when asked, --certificate-max-tokens); streamed windows place an anchored span whose
# 1-token certificate settles it, leaving no memorized span to the search.
SCAN = [
    "--span-tokens",
    "12",
    "--stride",
    "3",
    "--context-tokens",
    "12",
    "--certificate-max-tokens",
    "12",
    "--docs-per-shard",
    "1",
    "--min-match-rate",
    "0.9",
    "--max-candidates-per-doc",
    "1",
    "--steps",
    "30",
    "--candidates",
    "64",
    "--top-k",
    "64",
    "--restarts",
    "0",
    "--calibration-prompts",
    "0",
    "--screen-window",
    "exact",
]


def write_corpus(path: Path) -> Path:
    rng = random.Random(11)
    texts = [
        f"{salad(rng, 8)}\n{CANARIES[0]}\n{salad(rng, 6)}",
        f"{salad(rng, 6)}\n{CANARIES[1]}\n{salad(rng, 8)}",
    ]
    texts += [salad(rng, 16) for _ in range(8)]
    pq.write_table(pa.table({"id": [f"doc-{i}" for i in range(len(texts))], "text": texts}), path)
    return path


@pytest.fixture(scope="module")
def planned(tiny_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("plan")
    corpus = write_corpus(root / "corpus.parquet")
    full = cli("scan", str(corpus), "--model", str(tiny_dir), "--out", str(root / "full"), *SCAN)
    assert full.returncode == 0, full.stderr
    args = [
        "plan",
        str(corpus),
        "--model",
        str(tiny_dir),
        "--sample",
        "0.5",
        "--out",
        str(root / "plan"),
        "--workers",
        "4",
        *SCAN,
    ]
    text = cli(*args)  # every document screened; no caps: it draws from every candidate
    assert text.returncode == 0, text.stderr
    as_json = cli(*args, "--json")  # the same plan, so its run is resumed, not redone
    assert as_json.returncode == 0, as_json.stderr
    whole = json.loads(cli("status", str(root / "full")).stdout)["cost"]
    return root, text.stdout, json.loads(as_json.stdout), whole


@pytest.fixture(scope="module")
def sampled(planned, tiny_dir):
    """A plan that screens half the documents (the first plan's run must not be reused: a new --out)."""
    root = planned[0]
    done = cli(
        "plan",
        str(root / "corpus.parquet"),
        "--model",
        str(tiny_dir),
        "--sample",
        "1.0",
        "--screen-sample",
        "0.5",
        "--out",
        str(root / "half"),
        "--json",
        *SCAN,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_plan_screens_every_document_by_default_into_an_ordinary_run(planned):
    root, _, plan, _ = planned
    assert pq.read_table(root / "plan" / "sample.parquet").num_rows == 10
    assert plan["sample"]["documents"] == 10 and plan["sample"]["of"] == 10
    status = json.loads(cli("status", str(root / "plan" / "run")).stdout)
    assert status["phase"] == "complete" and status["cost"]["screen"]["parts"] == 10


def test_a_screen_sample_screens_that_share_of_the_documents(sampled, planned):
    root = planned[0]
    sample = pq.read_table(root / "half" / "sample.parquet")
    assert sample.num_rows == 5 and len(set(sample.column("id").to_pylist())) == 5
    assert sampled["sample"]["documents"] == 5 and sampled["sample"]["of"] == 10
    assert sampled["projection"]["range"].startswith("bootstrap over the sampled documents")
    assert sampled["projection"]["scale"]["value"] > 1  # half the bytes, scaled up


def test_every_input_and_figure_names_its_source(planned):
    _, text, plan, _ = planned
    assert (
        "screened: 10 of 10 documents" in text and "range: the screen's figures: none (every document" in text
    )
    assert "candidates the scan would search (drawn systematically along the rank)" in text
    for label in (
        "corpus tokens",
        "screen worker-seconds",
        "candidates",
        "settled by certificates",
        "passages",
        "wall time",
        "worker-hours",
        "budget to search all (seconds)",
    ):
        assert label in text, label
    inputs = text.split("inputs:\n")[1].splitlines()
    assert inputs and all(line.rstrip().endswith(")") and " (" in line for line in inputs)
    assert "parallel_efficiency = 0.85  (assumed" in text
    assert all(v["source"] for v in plan["inputs"].values())
    assert all(f["source"] for f in plan["projection"]["figures"].values())


def ordered(fig: dict) -> bool:
    return fig["value"] is None or fig["low"] <= fig["value"] <= fig["high"]


def test_json_has_every_key_and_ordered_ranges(planned):
    _, _, plan, _ = planned
    assert set(plan) == {"sample", "corpus", "inputs", "projection", "failed"}
    p = plan["projection"]
    assert {
        "figures",
        "search_s",
        "worker_s",
        "wall_s",
        "worker_h",
        "budget",
        "range",
        "scale",
        "searched_share",
    } <= set(p)
    names = {
        "corpus_tokens",
        "screen_s",
        "candidates",
        "certified",
        "certify_s",
        "search_s",
        "search_steps",
        "passages",
        "passage_s",
        "memorized.candidates",
        "memorized.seconds",
    }
    assert names <= set(p["figures"])
    for fig in [*p["figures"].values(), p["search_s"], p["worker_s"], p["wall_s"], p["worker_h"]]:
        assert ordered(fig), fig
    assert p["budget"]["given"] is None and p["budget"]["kind"] == "seconds"
    assert p["wall_s"]["value"] == pytest.approx(p["worker_s"]["value"] / (4 * 0.85))


def test_the_projection_matches_the_real_scan_of_the_whole_corpus(planned):
    root, _, plan, whole = planned
    figures = plan["projection"]["figures"]
    # Every document screened: the screen's counts are the whole scan's, exactly.
    assert figures["corpus_tokens"]["value"] == whole["screen"]["corpus_tokens"]
    assert figures["candidates"]["value"] == whole["screen"]["candidates"]
    assert figures["certified"]["value"] == whole["certify"]["settled"]
    # Screen seconds on the CPU: a tiny model's forward is dominated by per-call overheads, and the two
    # runs share two cores with whatever else the test session runs; a factor of 3 either way catches a
    # projection that scaled what it measured on every document (x2 here: the 0.5 of --sample).
    assert whole["screen"]["seconds"] / 3 <= figures["screen_s"]["value"] <= whole["screen"]["seconds"] * 3
    # The drawn candidates are searched as the scan searches them (same target, same seed): when the draw
    # holds every candidate the scan searches, the projected steps are the scan's, to the step.
    drawn = json.loads((root / "plan" / "run" / "search_plan.json").read_text())["drawn"]
    assert drawn["population"] == whole["search"]["candidates"] == len(drawn["spans"])
    steps = whole["search"]["steps"] + (whole.get("tighten") or {}).get("steps", 0)
    assert (
        figures["search_steps"]["value"]
        == figures["search_steps"]["low"]
        == figures["search_steps"]["high"]
        == steps
    )


def test_a_plan_draws_some_of_the_candidates_and_expands_them_to_all(planned, tiny_dir):
    """More candidates a document (up to 4, at a greedy-match rate of 0.5): the plan searches 2 of them,
    one in each half of the rank; the rest stay not_searched as not drawn, and the projection counts
    every candidate the scan would search."""
    root = planned[0]
    options = [
        *SCAN[: SCAN.index("--min-match-rate")],
        "--min-match-rate",
        "0.5",
        "--max-candidates-per-doc",
        "4",
        *SCAN[SCAN.index("--max-candidates-per-doc") + 2 :],
    ]
    done = cli(
        "plan",
        str(root / "corpus.parquet"),
        "--model",
        str(tiny_dir),
        "--sample",
        "2",
        "--out",
        str(root / "drawn"),
        "--json",
        *options,
    )
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    drawn = json.loads((root / "drawn" / "run" / "search_plan.json").read_text())["drawn"]
    population = drawn["population"]
    assert plan["sample"]["drawn"] == len(drawn["spans"]) == 2 < population
    first, second = drawn["positions"]
    assert first < population / 2 <= second < population
    rows = pq.read_table(root / "drawn" / "run" / "results").to_pylist()
    left = [r for r in rows if r["reason"] == "not drawn into the plan's sample of the search"]
    assert len(left) >= population - 2 and all(r["status"] == "not_searched" for r in left)
    searched = {r["span_id"] for r in rows if r["status"] in ("memorized", "not_memorized")}
    assert set(drawn["spans"]) <= searched
    f = plan["projection"]["figures"]
    outcomes = [k for k in f if k.endswith(".candidates")]
    assert sum(f[k]["value"] for k in outcomes) == pytest.approx(population)


def test_a_plan_relaunched_with_another_draw_is_refused_naming_the_fix(planned, tiny_dir):
    root = planned[0]
    done = cli(
        "plan",
        str(root / "corpus.parquet"),
        "--model",
        str(tiny_dir),
        "--sample",
        "3",
        "--out",
        str(root / "plan"),
        *SCAN,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "drawn with --sample 0.5 (share), seed 0; this one asks 3 (count)" in done.stderr
    assert "or a new --out" in done.stderr
    # The same draw from another screen sample: the fix names the option that changed.
    screen = cli(
        "plan",
        str(root / "corpus.parquet"),
        "--model",
        str(tiny_dir),
        "--sample",
        "0.5",
        "--screen-sample",
        "0.5",
        "--out",
        str(root / "plan"),
        *SCAN,
    )
    assert screen.returncode == 2, screen.stdout + screen.stderr
    assert "another screen sample (10 of 10 documents, seed 0" in screen.stderr
    assert "this one asks 5 of 10 documents, seed 0" in screen.stderr
    assert "the same corpus, --screen-sample and --seed to resume it" in screen.stderr


@pytest.mark.parametrize(
    "args, names",
    [
        (["--sample", "0"], ["--sample '0' must be above 0"]),
        (["--sample", "inf"], ["--sample 'inf' is not a finite number", "a share in (0, 1]"]),
        (
            ["--sample", "0.5", "--screen-sample", "nan"],
            ["--screen-sample 'nan' is not a finite number", "of documents (50)"],
        ),
        (["--sample", "2.0"], ["--sample '2.0': a share is at most 1", "whole number (2)", "of candidates"]),
        (
            ["--sample", "0.5", "--screen-sample", "11"],
            ["--screen-sample 11: the corpus has only 10 documents", "at most 10"],
        ),
        (
            ["--sample", "0.5", "--screen-sample", "x"],
            ["--screen-sample 'x' is not a number", "of documents (50)"],
        ),
        (["--sample", "0.5", "--workers", "0"], ["--workers 0: give at least 1"]),
    ],
)
def test_bad_input_exits_2_naming_the_value_and_the_fix(tmp_path, args, names):
    corpus = write_corpus(tmp_path / "c.parquet")
    done = cli(
        "plan", str(corpus), "--model", str(tmp_path / "no-model-needed"), "--out", str(tmp_path / "p"), *args
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert all(n in done.stderr for n in names), done.stderr
    assert not (tmp_path / "p" / "run").exists()


# The pure math (scanner/measures/plan.py).


def test_parse_sample_tells_a_share_from_a_count():
    assert pm.parse_sample("0.1") == ("share", 0.1) and pm.parse_sample("1.0") == ("share", 1.0)
    assert pm.parse_sample("50") == ("count", 50)
    for bad in ("0", "-1", "x", "nan", "1.5"):
        with pytest.raises(InputError, match="--sample"):
            pm.parse_sample(bad)
    assert pm.sample_size("share", 0.1, 95) == 10 and pm.sample_size("share", 0.001, 95) == 1
    assert pm.sample_size("count", 7, 95) == 7


def docs(n: int, tokens=100, seconds=1.0, bytes_=400) -> list[dict]:
    return [
        {
            "bytes": bytes_,
            "tokens": tokens,
            "screen_s": seconds,
            "candidates": 1,
            "memorized.candidates": 1,
            "memorized.seconds": 2.0,
            "search_s": 2.0,
            "steps": 10,
        }
        for _ in range(n)
    ]


COST = {
    "screen": {"corpus_tokens": 1000, "seconds": 10.0, "candidates": 10},
    "search": {
        "unit_seconds": 20.0,
        "steps": 100,
        "outcomes": {"memorized": {"candidates": 10, "steps": 100, "seconds": 20.0}},
    },
}


def test_project_scales_by_bytes_and_identical_documents_have_no_spread():
    p = pm.project(COST, docs(10), {"documents": 100, "bytes": 40_000}, workers=2, efficiency=0.5)
    f = p["figures"]
    assert p["scale"]["value"] == 10
    assert f["corpus_tokens"] == {**f["corpus_tokens"], "value": 10_000, "low": 10_000, "high": 10_000}
    assert f["memorized.candidates"]["value"] == 100 and f["search_steps"]["value"] == 1000
    assert p["worker_s"]["value"] == pytest.approx(100 + 200)  # screen + search, scaled
    assert p["wall_s"]["value"] == pytest.approx(300 / (2 * 0.5)) and p["worker_h"]["value"] == pytest.approx(
        600 / 3600
    )


def test_uneven_documents_give_an_ordered_range_around_the_projection():
    uneven = docs(8) + docs(2, tokens=300, seconds=5.0)
    cost = {**COST, "screen": {"corpus_tokens": 1400, "seconds": 18.0, "candidates": 10}}
    p = pm.project(cost, uneven, {"documents": 100, "bytes": 40_000}, workers=1, efficiency=1.0, seed=3)
    for fig in p["figures"].values():
        assert fig["low"] <= fig["value"] <= fig["high"]
    assert (
        p["figures"]["screen_s"]["low"] < p["figures"]["screen_s"]["value"] < p["figures"]["screen_s"]["high"]
    )
    again = pm.project(cost, uneven, {"documents": 100, "bytes": 40_000}, workers=1, efficiency=1.0, seed=3)
    assert again == p  # seeded


def test_a_budget_says_what_searching_everything_needs_and_caps_the_search():
    p = pm.project(
        COST, docs(10), {"documents": 100, "bytes": 40_000}, workers=1, efficiency=1.0, budget=("steps", 250)
    )
    assert p["budget"]["needed"]["value"] == 1000 and p["budget"]["given"] == 250
    assert p["budget"]["covers"]["value"] == 0.25 and p["searched_share"]["value"] == 0.25
    assert p["search_s"]["value"] == pytest.approx(200 * 0.25)
    enough = pm.project(
        COST,
        docs(10),
        {"documents": 100, "bytes": 40_000},
        workers=1,
        efficiency=1.0,
        budget=("seconds", 10_000),
    )
    assert enough["budget"]["covers"]["value"] == 1.0 and enough["search_s"]["value"] == 200
    capped = pm.project(
        COST, docs(10), {"documents": 100, "bytes": 40_000}, workers=1, efficiency=1.0, max_candidates=50
    )
    assert capped["searched_share"]["value"] == 0.5


def test_bad_workers_and_efficiency_name_the_fix():
    with pytest.raises(InputError, match=r"--workers 0: give at least 1"):
        pm.check_workers(0, 0.85)
    with pytest.raises(InputError, match=r"--efficiency 1.5: give a share in \(0, 1\]"):
        pm.check_workers(1, 1.5)


def scale_model():
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "bench" / "cluster" / "scale_model.py"
    spec = importlib.util.spec_from_file_location("scale_model", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["scale_model"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_scale_model_reads_a_runs_cost_and_says_where_each_input_comes_from(planned):
    root, _, _, whole = planned
    model = scale_model()
    assert model.main([]) == model.goal_table()  # no --run: the table of the constants alone
    inputs, sources = model.measured_inputs(root / "full")
    for name in (
        "tokens_per_book",
        "screen_s_per_span",
        "candidate_share",
        "step_s",
        "steps_memorized",
        "memorized_share",
        "span",
        "stride",
        "context",
    ):
        assert "measured in full" in sources[name] or "run_config.json of full" in sources[name], name
    assert sources["budget_gpu_h"] == "none" and sources["books"].startswith("assumed")
    assert inputs.tokens_per_book == whole["screen"]["corpus_tokens"] / 10
    assert inputs.candidate_share == whole["screen"]["candidate_share"] and inputs.span == 12
    table = model.main(["--run", str(root / "full"), "--books", "10"])
    assert "| books | 10 | given (--books) |" in table and "GPUs wall h" in table


def test_the_plan_runs_under_max_candidates_scaled_to_its_screen_and_without_the_budget():
    from scanner.config import CorpusConfig, ModelConfig, ScanConfig
    from scanner.run.plan import plan_config

    def config(budget, most):
        return ScanConfig(
            corpus=CorpusConfig(path="c.parquet"),
            model=ModelConfig(model="m"),
            search_budget=budget,
            max_candidates=most,
        )

    planned = plan_config(config("1000steps", 50), Path("s.parquet"), 0.1)
    assert (
        planned.max_candidates == 5 and planned.search_budget is None and planned.corpus.path == "s.parquet"
    )
    assert plan_config(config("90m", 3), Path("s"), 0.5).max_candidates == 2  # a count rounds up
    assert plan_config(config(None, 0), Path("s"), 0.1).max_candidates == 0  # no search, in the plan too
    assert plan_config(config(None, None), Path("s"), 1.0).max_candidates is None


@given(population=st.integers(0, 500), share=st.floats(0.01, 1.0), seed=st.integers(0, 10**6))
def test_a_systematic_draw_takes_one_in_each_stretch_of_the_rank(population, share, seed):
    size = pm.drawn_size("share", share, population)
    drawn = pm.systematic(population, size, seed)
    assert len(drawn) == len(set(drawn)) == size <= population
    assert drawn == sorted(drawn) and all(0 <= i < population for i in drawn)
    step = population / size if size else 0
    assert all(math.floor(k * step) <= i < math.ceil((k + 1) * step) for k, i in enumerate(drawn))
    assert size >= min(2, population)  # one draw would measure no spread


def test_every_position_is_drawn_with_the_same_chance():
    counts = [0] * 10
    for seed in range(2000):
        for i in pm.systematic(10, 3, seed):
            counts[i] += 1
    assert all(abs(c / 2000 - 0.3) < 0.05 for c in counts), counts


def test_expand_is_exact_when_everything_is_drawn_and_has_no_range_on_constant_costs():
    assert pm.expand([1.0, 5.0, 2.0], 3, 2.0) == (
        16.0,
        16.0,
        16.0,
    )  # a census: finite-population correction 0
    assert pm.expand([4.0] * 5, 50, 1.0) == (200.0, 200.0, 200.0)
    value, low, high = pm.expand([1.0, 9.0, 1.0, 9.0], 40, 1.0)
    assert value == 200 and low < value < high
    assert pm.expand([], 10, 1.0) == (0.0, 0.0, 0.0)


def test_a_sample_that_orders_its_costs_along_the_rank_gets_a_narrower_range_than_one_that_alternates():
    # Successive differences: costs that change slowly along the rank (memorized first, then refuted)
    # vary little between neighbours, so the systematic draw's estimate is tight; the same costs
    # alternating are as spread as a random sample's.
    smooth = [1.0] * 10 + [9.0] * 10
    rough = [1.0, 9.0] * 10
    width = {name: pm.expand(v, 200, 1.0) for name, v in (("smooth", smooth), ("rough", rough))}
    assert width["smooth"][0] == width["rough"][0]
    assert width["smooth"][2] - width["smooth"][1] < (width["rough"][2] - width["rough"][1]) / 3


def test_search_figures_expand_each_outcome_and_sum_to_the_whole():
    drawn = [
        {"outcome": "memorized", "steps": 10, "seconds": 2.0},
        {"outcome": "not_memorized", "steps": 100, "seconds": 8.0},
    ]
    f = pm.search_figures(drawn, 20, 1.5, "drawn")
    assert f["search_s"]["value"] == pytest.approx(20 * 5.0 * 1.5)
    assert f["memorized.candidates"]["value"] + f["not_memorized.candidates"]["value"] == pytest.approx(30)
    assert f["memorized.seconds"]["value"] + f["not_memorized.seconds"]["value"] == pytest.approx(
        f["search_s"]["value"]
    )
    assert all(ordered(fig) and fig["source"] == "drawn" for fig in f.values())


def test_a_drawn_search_replaces_the_scaled_one_and_the_budget_cuts_it():
    drawn = [{"outcome": "memorized", "steps": 50, "seconds": 5.0}] * 4
    search = pm.search_figures(drawn, 40, 1.0, "drawn")
    p = pm.project(
        COST,
        docs(10),
        {"documents": 10, "bytes": 4000},
        workers=1,
        efficiency=1.0,
        search=search,
        every_document=True,
        budget=("steps", 1000),
        max_candidates=40,
    )
    assert p["figures"]["screen_s"] == {**p["figures"]["screen_s"], "value": 10.0, "low": 10.0, "high": 10.0}
    assert (
        p["budget"]["needed"]["value"] == 2000 and p["searched_share"]["value"] == 0.5
    )  # the cap applied once
    assert p["search_s"]["value"] == pytest.approx(100)  # 200 s to search all 40, half the steps given
    assert p["worker_s"]["value"] == pytest.approx(10 + 100)
    assert "the search: 5%-95% normal interval" in p["range"]


def test_a_census_of_sampled_documents_keeps_the_spread_between_documents():
    # Every candidate of the screened documents drawn: the draw itself is exact, but the documents are a
    # sample, so the search's range is the documents' bootstrap (uneven documents: a real spread).
    uneven = docs(8) + [{**d, "search_s": 20.0, "memorized.seconds": 20.0} for d in docs(2)]
    drawn = [{"outcome": "memorized", "steps": 10, "seconds": 2.0}] * 8 + [
        {"outcome": "memorized", "steps": 10, "seconds": 20.0}
    ] * 2
    search = pm.search_figures(drawn, 10, 10.0, "drawn")
    assert search["search_s"]["low"] == search["search_s"]["value"] == search["search_s"]["high"]
    p = pm.project(
        COST, uneven, {"documents": 100, "bytes": 40_000}, workers=1, efficiency=1.0, search=search, seed=1
    )
    fig = p["figures"]["search_s"]
    assert fig["low"] < fig["value"] < fig["high"] and p["worker_s"]["low"] < p["worker_s"]["high"]
    assert "and the documents' bootstrap in quadrature" in p["range"]


def test_the_text_of_a_plan_says_its_draw_its_caps_and_what_the_budget_reaches():
    from scanner.cli.plan import plan_lines

    drawn = [{"outcome": "memorized", "steps": 50, "seconds": 5.0}] * 4
    projection = pm.project(
        COST,
        docs(10),
        {"documents": 100, "bytes": 40_000},
        workers=1,
        efficiency=1.0,
        budget=("steps", 1000),
        search=pm.search_figures(drawn, 40, 10.0, "drawn"),
    )
    caps = "drawn systematically along the rank; --search-budget 1000steps applied in the projection"
    plan = {
        "sample": {
            "documents": 10,
            "of": 100,
            "seed": 0,
            "bytes": 4000,
            "tokens": 1000,
            "path": "s.parquet",
            "run": "run",
            "caps": caps,
            "drawn": 4,
            "population": 40,
        },
        "corpus": {"documents": 100, "bytes": 40_000, "source": "counted"},
        "inputs": {"workers": {"value": 1, "source": "given (--workers)"}},
        "projection": projection,
    }
    text = "\n".join(plan_lines(plan))
    assert f"searched: 4 of the 40 candidates the scan would search ({caps})" in text
    assert "--search-budget given: 1,000 steps, reaching 5% " in text  # 40 x 10 x 50 steps needed
    assert "searched: 5% of the candidates" in text


def test_the_projection_counts_the_recall_audit_the_plan_does_not_run():
    """The plan's run audits nothing; the projection adds what --audit-sample would search after the
    budgeted search, at the sample's measured seconds per search (here 2 s: 200 s for 100 candidates)."""
    from scanner.config import parse_audit

    whole = {"documents": 100, "bytes": 40_000}
    share = pm.project(COST, docs(10), whole, workers=1, efficiency=1.0, audit=parse_audit("25%"))
    assert share["audit_s"]["searches"] == 25 and share["audit_s"]["value"] == pytest.approx(
        50
    )  # 25 % of 200 s
    assert (
        share["worker_s"]["value"] == pytest.approx(100 + 200 + 50)
        and "25% of the" in share["audit_s"]["source"]
    )
    capped = pm.project(
        COST, docs(10), whole, workers=1, efficiency=1.0, budget=("seconds", 40), audit=parse_audit("25%")
    )
    assert capped["audit_s"]["searches"] == 5, "a share of the search under its budget, not of all of it"
    count = pm.project(COST, docs(10), whole, workers=1, efficiency=1.0, audit=parse_audit("3"))
    assert count["audit_s"]["value"] == pytest.approx(6) and count["audit_s"]["searches"] == 3
    off = pm.project(COST, docs(10), whole, workers=1, efficiency=1.0, audit=parse_audit(0))
    assert off["audit_s"]["value"] == 0 and off["worker_s"]["value"] == pytest.approx(300)
    from scanner.cli.plan import plan_lines

    text = "\n".join(
        plan_lines(
            {
                "sample": {
                    "documents": 10,
                    "of": 100,
                    "seed": 0,
                    "bytes": 4000,
                    "tokens": 1000,
                    "path": "s.parquet",
                    "run": "r",
                    "caps": "",
                    "drawn": 10,
                    "population": 10,
                },
                "corpus": {**whole, "source": "counted"},
                "projection": share,
                "inputs": {},
            }
        )
    )
    assert re.search(r"recall audit, 25 searches\s+50\.0 s", text), text
