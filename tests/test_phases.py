"""Screen first, then search by evidence within a budget; certificates settle verdicts without search
(scanner/run/phases.py), through the CLI on the tiny model and one demo document each.

doc-0 holds a canary: its spans inside the canary have natural-prefix certificates (settled by
generation, no GCG), and spans that overlap the canary's edges are uncertified candidates of differing
evidence, the best of which is not the first in corpus order."""

import json
import shutil
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from scanner.cli.demo import demo_corpus
from scanner.measures import budget as bm
from scanner.schema import WALL_CLOCK

SCAN = ["--span-tokens", "12", "--stride", "2", "--context-tokens", "16", "--min-match-rate", "0.8", "--steps", "10",
        "--candidates", "64", "--top-k", "64", "--restarts", "0", "--calibration-prompts", "0", "--unit-size", "1"]
BUDGET = ["--search-budget", "1steps"]  # the first unit starts (nothing spent yet), no other


def cli(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "scanner", *args], capture_output=True, text=True, timeout=timeout)


def one_doc(root, doc: int):
    table = pq.read_table(demo_corpus(root / "demo.parquet"))
    path = root / f"doc-{doc}.parquet"
    pq.write_table(table.slice(doc, 1), path)
    return path


def comparable(run):
    rows = [{k: v for k, v in r.items() if k not in WALL_CLOCK} for r in pq.read_table(run / "results").to_pylist()]
    return sorted(rows, key=lambda r: r["span_id"])


@pytest.fixture(scope="module")
def budgeted(tiny_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("phases")
    corpus = one_doc(root, 0)
    out = root / "run"
    done = cli("scan", str(corpus), "--model", str(tiny_dir), "--out", str(out), *SCAN, *BUDGET)
    assert done.returncode == 0, done.stderr
    return corpus, out, pq.read_table(out / "results").to_pylist()


def test_a_small_budget_searches_the_best_evidence_first_not_corpus_order(budgeted):
    _, _, rows = budgeted
    searched = [r for r in rows if r["acr_kind"] in ("searched_min", "decision_bound")]
    waiting = [r for r in rows if r["status"] == "not_searched"]
    assert len(searched) == 1 and searched[0]["steps"] > 0 and waiting
    # The budget ran out before every verdict: nothing was shrunk, a memorized verdict is its bound.
    assert searched[0]["acr_kind"] == ("decision_bound" if searched[0]["memorized"] else "searched_min")
    assert all(r["reason"] == "search budget spent (--search-budget 1steps)" and r["acr"] is None for r in waiting)
    assert all(bm.evidence_key(searched[0]) < bm.evidence_key(r) for r in waiting), "the best evidence went first"
    assert min(r["token_start"] for r in waiting) < searched[0]["token_start"], "not the first in corpus order"


def test_certificates_settle_spans_by_generation_without_gcg(budgeted, tmp_path):
    _, out, rows = budgeted
    settled = [r for r in rows if r["acr_kind"] == "certificate_bound"]
    assert settled and all(r["status"] == "memorized" and r["steps"] == 0 and r["verified_generation"] for r in settled)
    for r in settled:
        assert r["prompt"] == r["certificate_prompt"] and r["certificate_tokens"] < r["target_tokens"]
        assert r["acr"] == r["target_tokens"] / r["prompt_tokens"] and r["prompt_tokens"] == r["certificate_tokens"]
    verified = cli("verify", str(out))  # an independent regeneration from every memorized prompt
    assert verified.returncode == 0, verified.stdout + verified.stderr
    status = json.loads(cli("status", str(out)).stdout)["phases"]
    assert status["certified"] == len(settled) and status["screened_shards"] == status["shards_total"] == 1
    assert status["search_units"]["done"] == 1 and status["search_units"]["total"] > 1
    assert status["budget"]["kind"] == "steps" and status["budget"]["total"] == 1 and status["budget"]["spent"] > 1
    assert status["not_searched"] == sum(r["status"] == "not_searched" for r in rows)
    export = tmp_path / "all.jsonl"
    assert cli("export", str(out), "--out", str(export), "--all").returncode == 0
    assert "not_searched" in export.read_text()
    assert cli("report", str(out), "--out", str(tmp_path / "r.html")).returncode == 0


def test_a_relaunch_after_a_kill_mid_search_gives_the_table_of_one_run(budgeted, tiny_dir, tmp_path):
    corpus, out, _ = budgeted
    killed = tmp_path / "run"
    shutil.copytree(out, killed)
    # As if killed after the screen and the certificates, before the search unit committed.
    for marker in [killed / "search" / "done" / "00000", *(killed / "done").iterdir()]:
        marker.unlink()
    again = cli("scan", str(corpus), "--model", str(tiny_dir), "--out", str(killed), *SCAN, *BUDGET)
    assert again.returncode == 0, again.stderr
    assert comparable(killed) == comparable(out)


def test_bad_budgets_exit_2_naming_the_value_and_the_forms(budgeted, tiny_dir, tmp_path):
    corpus, _, _ = budgeted
    bad = cli("scan", str(corpus), "--model", str(tiny_dir), "--out", str(tmp_path / "r"), "--search-budget", "2days")
    assert bad.returncode == 2 and "'2days'" in bad.stderr and "'20000steps'" in bad.stderr and "'90m'" in bad.stderr
    assert not (tmp_path / "r").exists()


def test_tighten_searches_the_settled_spans_and_keeps_the_shorter_prompt(tiny_dir, tmp_path):
    corpus = one_doc(tmp_path, 3)
    out = tmp_path / "run"
    # Only certified candidates (match rate 1); each certificate is one token, so the search tries the
    # template alone and keeps the certificate.
    args = [*SCAN[:6], "--min-match-rate", "1.0", *SCAN[8:], "--tighten"]
    done = cli("scan", str(corpus), "--model", str(tiny_dir), "--out", str(out), *args)
    assert done.returncode == 0, done.stderr
    rows = [r for r in pq.read_table(out / "results").to_pylist() if r["certificate_tokens"] is not None]
    assert rows and json.loads((out / "tighten_plan.json").read_text())["units"]
    assert all(r["acr_kind"] == "searched_min" and r["status"] == "memorized" for r in rows if r["certificate_tokens"] < 12)
    assert all(r["prompt_tokens"] <= r["certificate_tokens"] for r in rows if r["status"] == "memorized")


def test_a_tightening_search_replaces_a_bound_only_with_a_prompt_no_longer_and_both_costs_count():
    from scanner.run.phases import _better

    cert = {"acr_kind": "certificate_bound", "status": "memorized", "prompt_tokens": 3, "steps": 0, "search_s": 0.5}
    assert _better(cert, {"acr_kind": "searched_min", "status": "failed", "prompt_tokens": None}) is cert
    kept = _better(cert, {"acr_kind": "searched_min", "status": "not_memorized", "prompt_tokens": None, "steps": 7})
    assert kept["acr_kind"] == "certificate_bound" and kept["prompt_tokens"] == 3 and kept["steps"] == 7
    found = {"acr_kind": "searched_min", "status": "memorized", "prompt_tokens": 2, "steps": 5, "search_s": 1.0}
    assert _better(cert, found) == {**found, "search_s": 1.5, "forwards": 0}
    decided = {"acr_kind": "decision_bound", "status": "memorized", "prompt_tokens": 4, "steps": 9, "forwards": 3}
    # nothing shorter than the decided prompt: it is the schedule's minimum now, both searches' cost
    same = _better(decided, {"acr_kind": "searched_min", "status": "memorized", "prompt_tokens": 5, "steps": 2,
                             "forwards": 1})
    assert same["acr_kind"] == "searched_min" and same["prompt_tokens"] == 4 and (same["steps"], same["forwards"]) == (11, 4)
    screen = {"acr_kind": None, "status": "not_searched", "prompt_tokens": None}
    assert _better(screen, decided) is decided
