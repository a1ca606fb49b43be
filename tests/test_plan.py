"""`acr-scan plan`: scan a seeded sample of the corpus, project the whole scan (scanner/run/plan.py,
scanner/measures/plan.py). Through the CLI on the tiny model and ten short documents (two canaries in
word salad, eight of salad alone); the projection is checked against the real scan of the whole corpus
with the same options, and the pure projection math on its own."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from scanner.errors import InputError
from scanner.measures import plan as pm
from scanner.studies.tiny import CANARIES, salad

# Exact windows: the first canary's best candidate then has a certificate as long as the span (not
# shorter, so GCG searches it and the projection gets memorized-search figures); streamed windows place
# an anchored span whose 1-token certificate settles it, leaving no memorized span to the search.
SCAN = ["--span-tokens", "12", "--stride", "3", "--context-tokens", "12", "--docs-per-shard", "1",
        "--min-match-rate", "0.9", "--max-candidates-per-doc", "1", "--steps", "30", "--candidates", "64",
        "--top-k", "64", "--restarts", "0", "--calibration-prompts", "0", "--screen-window", "exact"]


def cli(*args, timeout=300):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.run([sys.executable, "-m", "scanner", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def write_corpus(path: Path) -> Path:
    rng = random.Random(11)
    texts = [f"{salad(rng, 8)}\n{CANARIES[0]}\n{salad(rng, 6)}", f"{salad(rng, 6)}\n{CANARIES[1]}\n{salad(rng, 8)}"]
    texts += [salad(rng, 16) for _ in range(8)]
    pq.write_table(pa.table({"id": [f"doc-{i}" for i in range(len(texts))], "text": texts}), path)
    return path


@pytest.fixture(scope="module")
def planned(tiny_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("plan")
    corpus = write_corpus(root / "corpus.parquet")
    full = cli("scan", str(corpus), "--model", str(tiny_dir), "--out", str(root / "full"), *SCAN)
    assert full.returncode == 0, full.stderr
    args = ["plan", str(corpus), "--model", str(tiny_dir), "--sample", "0.5", "--out", str(root / "plan"),
            "--workers", "4", *SCAN]
    text = cli(*args)  # no caps: the sample searches every candidate, as the whole scan below does
    assert text.returncode == 0, text.stderr
    as_json = cli(*args, "--json")  # the same sample, so its run is resumed, not redone
    assert as_json.returncode == 0, as_json.stderr
    whole = json.loads(cli("status", str(root / "full")).stdout)["cost"]
    return root, text.stdout, json.loads(as_json.stdout), whole


def test_plan_writes_its_sample_and_an_ordinary_run(planned):
    root, _, plan, _ = planned
    sample = pq.read_table(root / "plan" / "sample.parquet")
    assert sample.num_rows == 5 and len(set(sample.column("id").to_pylist())) == 5
    assert plan["sample"]["documents"] == 5 and plan["sample"]["of"] == 10
    status = json.loads(cli("status", str(root / "plan" / "run")).stdout)
    assert status["phase"] == "complete" and status["cost"]["screen"]["parts"] == 5


def test_every_input_and_figure_names_its_source(planned):
    _, text, plan, _ = planned
    assert "sample: 5 of 10 documents" in text and "range: bootstrap over the sampled documents" in text
    for label in ("corpus tokens", "screen worker-seconds", "candidates", "settled by certificates", "passages",
                  "wall time", "worker-hours", "budget to search all (seconds)", "(every candidate searched)"):
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
    assert {"figures", "search_s", "worker_s", "wall_s", "worker_h", "budget", "range", "scale", "searched_share"} <= set(p)
    names = {"corpus_tokens", "screen_s", "candidates", "certified", "certify_s", "search_s", "search_steps",
             "passages", "passage_s", "memorized.candidates", "memorized.seconds"}
    assert names <= set(p["figures"])
    for fig in [*p["figures"].values(), p["search_s"], p["worker_s"], p["wall_s"], p["worker_h"]]:
        assert ordered(fig), fig
    assert p["budget"]["given"] is None and p["budget"]["kind"] == "seconds"
    assert p["wall_s"]["value"] == pytest.approx(p["worker_s"]["value"] / (4 * 0.85))


def test_the_projection_matches_the_real_scan_of_the_whole_corpus(planned):
    _, _, plan, whole = planned
    figures = plan["projection"]["figures"]
    # Tokens scale with text bytes: salad and canaries have one tokens-per-byte, so 20 % is generous.
    assert figures["corpus_tokens"]["value"] == pytest.approx(whole["screen"]["corpus_tokens"], rel=0.2)
    # Screen seconds on the CPU: a tiny model's forward is dominated by per-call overheads (a shard's
    # first batch, Python, tokenizer), not by tokens, and the two runs share two cores with whatever
    # else the test session runs, so seconds measured a second apart differ by tens of percent. A factor
    # of 3 either way catches a projection that forgot to scale (x2 here) or scaled twice, not noise.
    assert whole["screen"]["seconds"] / 3 <= figures["screen_s"]["value"] <= whole["screen"]["seconds"] * 3
    # Candidates are counted, not timed: the two canary documents carry them; the range must hold the truth.
    assert figures["candidates"]["low"] <= whole["screen"]["candidates"] <= figures["candidates"]["high"] * 1.5


@pytest.mark.parametrize("args, names", [
    (["--sample", "0"], ["--sample '0' must be above 0"]),
    (["--sample", "2.0"], ["--sample '2.0': a share is at most 1", "whole number (2)"]),
    (["--sample", "11"], ["--sample 11: the corpus has only 10 documents", "at most 10"]),
    (["--sample", "0.5", "--workers", "0"], ["--workers 0: give at least 1"]),
])
def test_bad_input_exits_2_naming_the_value_and_the_fix(tmp_path, args, names):
    corpus = write_corpus(tmp_path / "c.parquet")
    done = cli("plan", str(corpus), "--model", str(tmp_path / "no-model-needed"), "--out", str(tmp_path / "p"), *args)
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
    return [{"bytes": bytes_, "tokens": tokens, "screen_s": seconds, "candidates": 1, "memorized.candidates": 1,
             "memorized.seconds": 2.0, "search_s": 2.0, "steps": 10} for _ in range(n)]


COST = {"screen": {"corpus_tokens": 1000, "seconds": 10.0, "candidates": 10},
        "search": {"unit_seconds": 20.0, "steps": 100, "outcomes": {"memorized": {"candidates": 10, "steps": 100,
                                                                                   "seconds": 20.0}}}}


def test_project_scales_by_bytes_and_identical_documents_have_no_spread():
    p = pm.project(COST, docs(10), {"documents": 100, "bytes": 40_000}, workers=2, efficiency=0.5)
    f = p["figures"]
    assert p["scale"]["value"] == 10
    assert f["corpus_tokens"] == {**f["corpus_tokens"], "value": 10_000, "low": 10_000, "high": 10_000}
    assert f["memorized.candidates"]["value"] == 100 and f["search_steps"]["value"] == 1000
    assert p["worker_s"]["value"] == pytest.approx(100 + 200)  # screen + search, scaled
    assert p["wall_s"]["value"] == pytest.approx(300 / (2 * 0.5)) and p["worker_h"]["value"] == pytest.approx(600 / 3600)


def test_uneven_documents_give_an_ordered_range_around_the_projection():
    uneven = docs(8) + docs(2, tokens=300, seconds=5.0)
    cost = {**COST, "screen": {"corpus_tokens": 1400, "seconds": 18.0, "candidates": 10}}
    p = pm.project(cost, uneven, {"documents": 100, "bytes": 40_000}, workers=1, efficiency=1.0, seed=3)
    for fig in p["figures"].values():
        assert fig["low"] <= fig["value"] <= fig["high"]
    assert p["figures"]["screen_s"]["low"] < p["figures"]["screen_s"]["value"] < p["figures"]["screen_s"]["high"]
    again = pm.project(cost, uneven, {"documents": 100, "bytes": 40_000}, workers=1, efficiency=1.0, seed=3)
    assert again == p  # seeded


def test_a_budget_says_what_searching_everything_needs_and_caps_the_search():
    p = pm.project(COST, docs(10), {"documents": 100, "bytes": 40_000}, workers=1, efficiency=1.0,
                   budget=("steps", 250))
    assert p["budget"]["needed"]["value"] == 1000 and p["budget"]["given"] == 250
    assert p["budget"]["covers"]["value"] == 0.25 and p["searched_share"]["value"] == 0.25
    assert p["search_s"]["value"] == pytest.approx(200 * 0.25)
    enough = pm.project(COST, docs(10), {"documents": 100, "bytes": 40_000}, workers=1, efficiency=1.0,
                        budget=("seconds", 10_000))
    assert enough["budget"]["covers"]["value"] == 1.0 and enough["search_s"]["value"] == 200
    capped = pm.project(COST, docs(10), {"documents": 100, "bytes": 40_000}, workers=1, efficiency=1.0,
                        max_candidates=50)
    assert capped["searched_share"]["value"] == 0.5


def test_bad_workers_and_efficiency_name_the_fix():
    with pytest.raises(InputError, match=r"--workers 0: give at least 1"):
        pm.check_workers(0, 0.85)
    with pytest.raises(InputError, match=r"--efficiency 1.5: give a share in \(0, 1\]"):
        pm.check_workers(1, 1.5)


def scale_model():
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "bench" / "scale_model.py"
    spec = importlib.util.spec_from_file_location("scale_model", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["scale_model"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_scale_model_reads_a_runs_cost_and_says_where_each_input_comes_from(planned):
    root, _, _, whole = planned
    model = scale_model()
    assert model.main([]) == model.goal_table()  # no --run: the constants' table, as before
    inputs, sources = model.measured_inputs(root / "full")
    for name in ("tokens_per_book", "screen_s_per_span", "candidate_share", "step_s", "steps_memorized",
                 "memorized_share", "span", "stride", "context"):
        assert "measured in full" in sources[name] or "run_config.json of full" in sources[name], name
    assert sources["budget_gpu_h"] == "none" and sources["books"].startswith("assumed")
    assert inputs.tokens_per_book == whole["screen"]["corpus_tokens"] / 10
    assert inputs.candidate_share == whole["screen"]["candidate_share"] and inputs.span == 12
    table = model.main(["--run", str(root / "full"), "--books", "10"])
    assert "| books | 10 | given (--books) |" in table and "GPUs wall h" in table


def test_the_sample_runs_under_the_caps_scaled_to_its_share():
    from scanner.config import CorpusConfig, ModelConfig, ScanConfig
    from scanner.run.plan import sample_caps

    def config(budget, most):
        return ScanConfig(corpus=CorpusConfig(path="c.parquet"), model=ModelConfig(model="m"),
                          search_budget=budget, max_candidates=most)

    assert sample_caps(config("1000steps", 50), 0.1) == ("100steps", 5)
    assert sample_caps(config("90m", 3), 0.5) == ("2700.000s", 2)  # a count rounds up: the sample searches
    assert sample_caps(config(None, 0), 0.1) == (None, 0)  # --max-candidates 0: no search, in the sample too
    assert sample_caps(config(None, None), 0.1) == (None, None)


def test_a_capped_sample_keeps_its_search_and_extrapolates_what_searching_all_needs():
    sample = [{**d, "not_searched": 3} for d in docs(10)]  # 1 searched, 3 left a document
    p = pm.project(COST, sample, {"documents": 100, "bytes": 40_000}, workers=1, efficiency=1.0,
                   budget=("steps", 1000), capped_sample=True)
    assert p["search_s"]["value"] == pytest.approx(200)  # what the sample spent, scaled, not cut again
    assert p["searched_share"]["value"] == pytest.approx(0.25)
    assert p["budget"]["needed"]["value"] == pytest.approx(4000)  # 1000 steps x (1 + 3) / 1
    assert p["budget"]["covers"]["value"] == pytest.approx(0.25)


def test_the_text_of_a_capped_plan_says_the_caps_and_what_the_budget_reaches():
    from scanner.cli.plan import plan_lines

    sample = [{**d, "not_searched": 3} for d in docs(10)]
    projection = pm.project(COST, sample, {"documents": 100, "bytes": 40_000}, workers=1, efficiency=1.0,
                            budget=("steps", 1000), capped_sample=True)
    caps = "searched under the caps scaled to its share 0.1: --search-budget 100steps"
    plan = {"sample": {"documents": 10, "of": 100, "seed": 0, "bytes": 4000, "tokens": 1000, "path": "s.parquet",
                       "run": "run", "caps": caps},
            "corpus": {"documents": 100, "bytes": 40_000, "source": "counted"},
            "inputs": {"workers": {"value": 1, "source": "given (--workers)"}}, "projection": projection}
    text = "\n".join(plan_lines(plan))
    assert f"({caps})" in text
    assert "--search-budget given: 1,000 steps, reaching 25% " in text
    assert "searched: 25% of the candidates" in text
