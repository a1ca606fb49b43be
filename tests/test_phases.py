"""Screen first, then search by evidence within a budget; certificates settle verdicts without search
(scanner/run/phases.py), through the CLI on the tiny model and one demo document each.

doc-0 holds a canary: its spans inside the canary have natural-prefix certificates (settled by
generation, no GCG), and spans that overlap the canary's edges are uncertified candidates of differing
evidence, the best of which is not the first in corpus order."""

import json
import re
import shutil
from collections import Counter

import pyarrow.parquet as pq
import pytest
from cliopts import FINE_SPANS
from clirun import cli

from scanner.cli.demo import demo_corpus
from scanner.measures import budget as bm
from scanner.run.write import WAITED
from scanner.schema import WALL_CLOCK

SCAN = FINE_SPANS
BUDGET = ["--search-budget", "1steps"]  # the first unit starts (nothing spent yet), no other


def one_doc(root, doc: int):
    table = pq.read_table(demo_corpus(root / "demo.parquet"))
    path = root / f"doc-{doc}.parquet"
    pq.write_table(table.slice(doc, 1), path)
    return path


def comparable(run):
    rows = [
        {k: v for k, v in r.items() if k not in WALL_CLOCK}
        for r in pq.read_table(run / "results").to_pylist()
    ]
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
    assert all(
        r["reason"].startswith(
            "not reached: the search budget (--search-budget 1steps) was spent before its turn"
        )
        and r["acr"] is None
        for r in waiting
    )
    # Windows beside a span a certificate found wait behind the rest (measures/budget.py fresh_first).
    fresh = [r for r in waiting if not r["reason"].endswith(WAITED)]
    assert all(bm.evidence_key(searched[0]) < bm.evidence_key(r) for r in fresh), (
        "the best evidence went first"
    )
    assert min(r["token_start"] for r in waiting) < searched[0]["token_start"], (
        "not the first in corpus order"
    )


def test_certificates_settle_spans_by_generation_without_gcg(budgeted, tmp_path):
    _, out, rows = budgeted
    settled = [r for r in rows if r["acr_kind"] == "certificate_bound"]
    assert settled and all(
        r["status"] == "memorized" and r["steps"] == 0 and r["verified_generation"] for r in settled
    )
    for r in settled:
        assert r["prompt"] == r["certificate_prompt"] and r["certificate_tokens"] < r["target_tokens"]
        assert (
            r["acr"] == r["target_tokens"] / r["prompt_tokens"]
            and r["prompt_tokens"] == r["certificate_tokens"]
        )
    verified = cli("verify", str(out))  # an independent regeneration from every memorized prompt
    assert verified.returncode == 0, verified.stdout + verified.stderr
    sources = Counter(r["prompt_source"] for r in rows if r["status"] == "memorized")
    assert (
        f"prompts holding the work's text: {sources['work_text']}/{sources['work_text']} reproduce"
        in verified.stdout
    )
    assert (
        f"prompts free of the work's text: {sources['free']}/{sources['free']} reproduce" in verified.stdout
    )
    status = json.loads(cli("status", str(out)).stdout)["phases"]
    assert status["certified"] == len(settled) and status["screened_shards"] == status["shards_total"] == 1
    assert status["search_units"]["done"] == 1 and status["search_units"]["total"] > 1
    assert (
        status["budget"]["kind"] == "steps"
        and status["budget"]["total"] == 1
        and status["budget"]["spent"] > 1
    )
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
    bad = cli(
        "scan",
        str(corpus),
        "--model",
        str(tiny_dir),
        "--out",
        str(tmp_path / "r"),
        "--search-budget",
        "2days",
    )
    assert (
        bad.returncode == 2
        and "'2days'" in bad.stderr
        and "'20000steps'" in bad.stderr
        and "'90m'" in bad.stderr
    )
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
    for r in (r for r in rows if r["status"] == "memorized"):  # both units' attempts, in the order they ran
        stages = [a["stage"] for a in r["attempts"]]
        assert stages[0] == "certify" and set(stages[1:]) == {"tighten"}, stages
        assert (
            r["attempts"][1]["warm"] == "certificate" and sum(a["steps"] for a in r["attempts"]) == r["steps"]
        )
    assert all(
        r["acr_kind"] == "searched_min" and r["status"] == "memorized"
        for r in rows
        if r["certificate_tokens"] < 12
    )
    assert all(r["prompt_tokens"] <= r["certificate_tokens"] for r in rows if r["status"] == "memorized")


def test_a_tightening_search_replaces_a_bound_only_with_a_prompt_no_longer_and_both_costs_count():
    from scanner.run.write import _better

    cert = {
        "acr_kind": "certificate_bound",
        "status": "memorized",
        "prompt_tokens": 3,
        "steps": 0,
        "search_s": 0.5,
    }
    assert _better(cert, {"acr_kind": "searched_min", "status": "failed", "prompt_tokens": None}) is cert
    kept = _better(
        cert, {"acr_kind": "searched_min", "status": "not_memorized", "prompt_tokens": None, "steps": 7}
    )
    assert kept["acr_kind"] == "certificate_bound" and kept["prompt_tokens"] == 3 and kept["steps"] == 7
    found = {
        "acr_kind": "searched_min",
        "status": "memorized",
        "prompt_tokens": 2,
        "steps": 5,
        "search_s": 1.0,
    }
    assert _better(cert, found) == {**found, "search_s": 1.5, "forwards": 0, "attempts": []}
    # both units' attempts are kept in the order they ran, whichever prompt stands
    first, then = [{"stage": "certify", "steps": 0}], [{"stage": "tighten", "steps": 5}]
    assert _better({**cert, "attempts": first}, {**found, "attempts": then})["attempts"] == first + then
    assert (
        _better({**cert, "attempts": first}, {**found, "prompt_tokens": 4, "attempts": then})["attempts"]
        == first + then
    )
    decided = {
        "acr_kind": "decision_bound",
        "status": "memorized",
        "prompt_tokens": 4,
        "steps": 9,
        "forwards": 3,
    }
    # nothing shorter than the decided prompt: it is the schedule's minimum now, both searches' cost
    same = _better(
        decided,
        {"acr_kind": "searched_min", "status": "memorized", "prompt_tokens": 5, "steps": 2, "forwards": 1},
    )
    assert (
        same["acr_kind"] == "searched_min"
        and same["prompt_tokens"] == 4
        and (same["steps"], same["forwards"]) == (11, 4)
    )
    screen = {"acr_kind": None, "status": "not_searched", "prompt_tokens": None}
    assert _better(screen, decided) is decided


def test_certificates_are_work_text_and_the_gcg_prompt_is_free(budgeted):
    _, _, rows = budgeted
    certified = [r for r in rows if r["acr_kind"] == "certificate_bound"]
    assert certified and all(r["prompt_source"] == "work_text" for r in certified)
    assert all(r["prompt_doc_run_tokens"] >= r["prompt_span_run_tokens"] for r in certified)
    gcg = [r for r in rows if r["acr_kind"] in ("searched_min", "decision_bound")]
    assert len(gcg) == 1 and gcg[0]["memorized"], "the budget's one search found a prompt (fixed seed)"
    assert gcg[0]["prompt_source"] == "free" and gcg[0]["prompt_doc_run_tokens"] < 4
    assert all(r["prompt_source"] is None for r in rows if r["prompt"] is None)


def test_a_prompt_of_random_tokens_is_free_and_the_documents_own_words_are_work_text(budgeted, engine):
    import torch

    from scanner.results.rows import measured_prompt
    from scanner.search.miniprompt import random_prompt
    from scanner.stages.spans import tokenize_document

    corpus, _, rows = budgeted
    text = pq.read_table(corpus)["text"][0].as_py()
    ids, _ = tokenize_document(text, engine.tokenizer)
    span = {
        **next(r for r in rows if r["status"] == "memorized"),
        "acr_kind": "searched_min",
        "certificate_prompt": None,
    }
    generator = torch.Generator().manual_seed(0)
    for _ in range(20):  # GCG's starting points: random allowed tokens
        prompt = random_prompt(engine, 8, generator)
        row = measured_prompt({**span, "prompt": engine.decode(prompt), "prompt_ids": prompt}, 4, text, ids)
        assert row["prompt_source"] == "free" and row["prompt_doc_run_tokens"] < 4
    own = measured_prompt({**span, "prompt": engine.decode(ids[3:9]), "prompt_ids": ids[3:9]}, 4, text, ids)
    assert own["prompt_source"] == "work_text" and own["prompt_doc_run_tokens"] == 6


def test_every_attempt_is_recorded_and_sums_to_the_rows_steps(budgeted):
    _, _, rows = budgeted
    decided = [r for r in rows if r["status"] in ("memorized", "not_memorized")]
    assert decided and all(r["attempts"] for r in decided)
    for r in decided:
        assert sum(a["steps"] for a in r["attempts"]) == r["steps"]
        assert all(
            a["steps"] <= a["max_steps"] or a["warm"] in ("certificate", "decided") for a in r["attempts"]
        )
        successes = [a for a in r["attempts"] if a["outcome"] == "success"]
        assert bool(successes) == (r["prompt"] is not None), (
            "a prompt stands exactly when an attempt succeeded"
        )
        assert not successes or min(a["length"] for a in successes) == r["prompt_tokens"]
    searched = next(r for r in decided if r["acr_kind"] != "certificate_bound")
    assert {a["stage"] for a in searched["attempts"]} == {"search"} and searched["attempts"][0][
        "seed"
    ] is not None
    assert all(r["attempts"] == [] for r in rows if r["status"] in ("not_searched", "screened_out"))


def counted(rows: list[dict]) -> dict:
    """The denominators by hand from the results rows."""
    status = Counter(r["status"] for r in rows)
    certified = sum(r["acr_kind"] == "certificate_bound" for r in rows)
    free = sum(r["status"] == "memorized" and r["prompt_source"] == "free" for r in rows)
    return {
        "documents": len({r["doc_row"] for r in rows}),
        "spans": len(rows),
        "screened": sum(r["greedy_match_rate"] is not None for r in rows),
        "candidates": status["memorized"]
        + status["not_memorized"]
        + status["not_searched"]
        + status["failed"],
        "settled_by_certificate": certified,
        "searched": status["memorized"] + status["not_memorized"] - certified,
        "not_searched": status["not_searched"],
        "failed": status["failed"],
        "memorized": status["memorized"],
        "not_memorized": status["not_memorized"],
        "copies": 0,
        "attempts": sum(len(r["attempts"]) for r in rows),
        "gcg_steps": sum(r["steps"] for r in rows),
        "memorized_by_prompt": {"free": free, "work_text": status["memorized"] - free, "unmeasured": 0},
        "memorized_in_several_documents": sum((r["copies_in_corpus"] or 0) > 1 for r in rows),
        "audited": sum(r["audit_stratum"] is not None and r["searched_as"] is None for r in rows),
        "audit_memorized": sum(
            r["audit_stratum"] is not None and r["searched_as"] is None and r["status"] == "memorized"
            for r in rows
        ),
        "fragile": sum(r["status"] == "memorized" and r["fragile"] is True for r in rows),
    }


def test_export_and_report_carry_the_denominators_of_the_results_table(budgeted, tmp_path):
    _, out, rows = budgeted
    expected = counted(rows)
    assert expected["not_searched"] and expected["settled_by_certificate"] and expected["searched"]
    flagged = tmp_path / "flagged.csv"
    done = cli("export", str(out), "--out", str(flagged))
    assert done.returncode == 0, done.stderr
    sidecar = json.loads((tmp_path / "flagged.csv.denominators.json").read_text())
    assert sidecar["run"] == expected and sidecar["selection"]["work_text_tokens"] == 4
    assert (
        f"{expected['candidates']} candidates" in done.stdout
        and f"{expected['not_searched']} not searched" in done.stdout
    )
    assert cli("report", str(out), "--out", str(tmp_path / "r.html")).returncode == 0
    page = (tmp_path / "r.html").read_text()
    shown = dict(
        re.findall(r"<dt>([^<]+)</dt><dd>([^<]+)</dd>", page.split("What the hits were drawn from")[1])
    )
    assert shown["candidates (passed the screen)"] == str(expected["candidates"])
    assert shown["settled by certificate"] == str(expected["settled_by_certificate"])
    assert shown["not searched (budget)"] == str(expected["not_searched"])
    assert shown["memorized, prompt free of the work&#x27;s text"] == str(
        expected["memorized_by_prompt"]["free"]
    )


def test_free_prompts_only_exports_only_prompts_free_of_the_works_text(budgeted, tmp_path):
    _, out, rows = budgeted
    free = tmp_path / "free.jsonl"
    done = cli("export", str(out), "--out", str(free), "--free-prompts-only")
    assert done.returncode == 0, done.stderr
    exported = [json.loads(line) for line in free.read_text().splitlines()]
    expected = [r["span_id"] for r in rows if r["status"] == "memorized" and r["prompt_source"] == "free"]
    assert exported and [r["span_id"] for r in exported] == expected
    assert all(r["prompt_source"] == "free" and r["attempts"] for r in exported)
    assert json.loads((tmp_path / "free.jsonl.denominators.json").read_text())["rows_by_prompt_source"] == {
        "free": len(expected),
        "work_text": 0,
    }
