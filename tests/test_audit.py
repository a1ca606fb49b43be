"""The recall audit, through the CLI on the tiny model: after a budgeted search, a seeded
stratified sample of what the budget left and of what the screen dropped is searched, and recall.json
states how many memorized spans the unsearched still hold, with an exact interval that holds the truth.

The truth comes from the same corpus scanned without a budget: every candidate searched."""

import json
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from clirun import cli

from scanner.schema import RESULTS_WALL_CLOCK
from scanner.studies.tiny import CANARIES, salad

# Three canaries, each in its own document among the model's unseen salad: stride 6 cuts each canary into
# several memorized windows (15 spans, 8 candidates beside the certified ones, the rest screened out).
CARDS = [
    "--span-tokens",
    "12",
    "--stride",
    "6",
    "--context-tokens",
    "16",
    "--min-match-rate",
    "0.8",
    "--steps",
    "10",
    "--candidates",
    "64",
    "--top-k",
    "64",
    "--restarts",
    "0",
    "--calibration-prompts",
    "0",
    "--extend-tokens",
    "0",
    "--unit-size",
    "2",
]


CUT = [*CARDS, "--max-candidates", "1", "--audit-sample", "3"]


def rows_of(out):
    return {r["span_id"]: r for r in pq.read_table(out / "results").to_pylist()}


def audit_corpus(root):
    """Three canaries, each between two short salads: the screen drops some of their windows."""
    rng = random.Random(5)
    texts = [f"{salad(rng, 5)} {canary} {salad(rng, 5)}" for canary in CANARIES[:3]]
    path = root / "corpus.parquet"
    pq.write_table(pa.table({"id": [f"d{i}" for i in range(len(texts))], "text": texts}), path)
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return audit_corpus(tmp_path_factory.mktemp("audit"))


@pytest.fixture(scope="module")
def full(tiny_dir, corpus):
    """Every candidate searched, and an audit of three over what the screen dropped."""
    out = corpus.parent / "full"
    done = cli(
        "scan", str(corpus), "--model", str(tiny_dir), "--out", str(out), *CARDS, "--audit-sample", "3"
    )
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="module")
def cut(tiny_dir, corpus):
    """One candidate searched, then a sample of three from the rest (one a stratum)."""
    out = corpus.parent / "cut"
    done = cli("scan", str(corpus), "--model", str(tiny_dir), "--out", str(out), *CUT)
    assert done.returncode == 0, done.stderr
    return out


def test_the_estimate_of_what_the_budget_left_holds_the_true_count(full, cut):
    truth_rows, rows = rows_of(full), rows_of(cut)
    recall = json.loads((cut / "recall.json").read_text())
    left = [s for s in recall["strata"] if s["stratum"].startswith("not_searched/")]
    assert left and sum(s["drawn"] for s in left) < sum(s["total"] for s in left), "a sample, not a census"
    # The true count: memorized targets (own search, not copies) of the full run that the cut run's
    # budget left: not_searched there, or drawn by its audit from the not_searched part.
    unsearched = {
        span
        for span, r in rows.items()
        if r["status"] == "not_searched" or (r["audit_stratum"] or "").startswith("not_searched/")
    }
    truly = sum(
        1
        for span in unsearched
        if truth_rows[span]["status"] == "memorized"
        and truth_rows[span]["searched_as"] is None
        and truth_rows[span]["audit_stratum"] is None
    )
    hits = sum(s["hits"] for s in left)
    assert truly > hits, "the budget left memorized spans the audit did not draw: the estimate has work to do"
    low, high = sum(s["missed_low"] for s in left), sum(s["missed_high"] for s in left)
    assert low <= truly - hits <= high, (low, truly - hits, high)
    assert recall["found"] == sum(
        r["status"] == "memorized" and r["searched_as"] is None for r in rows.values()
    )
    assert recall["recall_low"] <= recall["recall_high"] and 0 <= recall["recall_low"] <= 1


def test_audited_rows_are_marked_and_cost_their_own_line(cut):
    rows = rows_of(cut)
    recall = json.loads((cut / "recall.json").read_text())
    audited = {span: r for span, r in rows.items() if r["audit_stratum"] is not None}
    drawn = {span for spans in recall["strata_drawn"].values() for span in spans}
    assert set(audited) == drawn and len(drawn) == 3
    assert all(r["status"] in ("memorized", "not_memorized") and r["steps"] > 0 for r in audited.values())
    status = json.loads(cli("status", str(cut)).stdout)
    assert status["recall"] == recall and status["phase"] == "complete"
    assert status["cost"]["audit"]["candidates"] == 3
    assert status["cost"]["search"]["candidates"] == 1, "the audit is not counted in the search's budget"


def test_nothing_left_by_the_budget_gives_zero_with_an_upper_bound(full, tmp_path):
    recall = json.loads((full / "recall.json").read_text())
    assert {s["stratum"].split("/")[0] for s in recall["strata"]} == {"screened_out"}, "no candidate was left"
    assert recall["hits"] == 0 and recall["missed"] == 0 and recall["missed_low"] == 0
    assert recall["missed_high"] > 0, "a clean sample of a larger population bounds it, not proves it empty"
    assert recall["drawn"] == 3 < sum(s["total"] for s in recall["strata"])
    report = tmp_path / "report.html"
    assert cli("report", str(full), "--out", str(report)).returncode == 0
    page = report.read_text()
    assert "What the search left unsearched" in page and f"0 to {recall['missed_high']}" in page
    bundle = tmp_path / "bundle"
    exported = cli("export", str(full), "--bundle", str(bundle))
    assert exported.returncode == 0, exported.stderr
    assert json.loads((bundle / "denominators.json").read_text())["recall"] == recall


def test_a_relaunch_mid_audit_gives_the_same_table(cut, tiny_dir, corpus, tmp_path):
    import shutil

    out = tmp_path / "cut"
    shutil.copytree(cut, out)
    # A kill during the last audit unit: its part never committed, the results never written.
    for marker in [out / "audit" / "done" / "00001", out / "recall.json", *(out / "done").iterdir()]:
        marker.unlink()
    again = cli("scan", str(corpus), "--model", str(tiny_dir), "--out", str(out), *CUT)
    assert again.returncode == 0, again.stderr

    def strip(rows):
        return {s: {k: v for k, v in r.items() if k not in RESULTS_WALL_CLOCK} for s, r in rows.items()}

    assert strip(rows_of(out)) == strip(rows_of(cut))
    assert json.loads((out / "recall.json").read_text()) == json.loads((cut / "recall.json").read_text())


def test_a_running_audit_unit_shows_in_status_and_watch_with_its_eta_and_calibration(cut, tmp_path):
    """Killed mid-audit, as a live scan would hold it: the audit's last unit running (its progress file
    written by the worker's own UnitProgress, calibrating), its ETA priced from the draw."""
    import os
    import shutil

    from scanner.run.heartbeat import UnitProgress
    from scanner.storage.lock import holder_of

    out = tmp_path / "cut"
    shutil.copytree(cut, out)
    for marker in [out / "audit" / "done" / "00001", out / "recall.json", *(out / "done").iterdir()]:
        marker.unlink()
    (out / "lock").write_text(json.dumps(holder_of(os.getpid())))
    plan = json.loads((out / "audit_plan.json").read_text())
    spans = [span for _, span in plan["units"][1]]
    watcher = UnitProgress(out, "audit-00001", spans)
    watcher.stage("calibration", 0, 1)
    status = json.loads(cli("status", str(out)).stdout)
    shown = cli("status", str(out), "--watch", "--iterations", "1").stdout
    (unit,) = status["running"]
    assert unit["unit"] == "audit-00001" and unit["stage"] == {"name": "calibration", "done": 0, "total": 1}
    audit = status["progress"]["audit"]
    assert status["phase"] == "audit" and audit["units_done"] == 1 and audit["candidates_total"] == 3
    assert audit["eta_s"] is not None and audit["eta_s"] > 0, "priced before and after its first unit"
    assert "audit-00001: 0/1 candidates done; calibration of 0/1 memorized spans" in shown, shown
    assert "to the end of the recall audit" in shown, shown
    watcher.close()  # its heartbeat's timer stops with it


def test_the_default_audit_follows_the_search_it_audits(tiny_dir, corpus, tmp_path):
    """A scan told --max-candidates 2 at the default --audit-sample (25 % of the search's seconds) runs
    at most what a quarter of its search's seconds buys at its own measured price: none or one search,
    never 16; the log says what the audit will cost before it starts."""
    from scanner.config import parse_audit
    from scanner.measures.recall import audit_size

    out = tmp_path / "two"
    done = cli(
        "-v",
        "scan",
        str(corpus),
        "--model",
        str(tiny_dir),
        "--out",
        str(out),
        *CARDS,
        "--max-candidates",
        "2",
        "--audit-sample",
        "25%",
    )
    assert done.returncode == 0, done.stderr
    plan = json.loads((out / "audit_plan.json").read_text())
    cost = plan["cost"]
    assert plan["sample"] == "25%" and cost["searches"] == 2 and cost["per_search_s"] > 0
    assert (plan["size"], plan["why"]) == audit_size(parse_audit("25%"), cost)
    assert plan["size"] * cost["per_search_s"] <= 0.25 * cost["spent_s"] and plan["size"] <= 1
    status = json.loads(cli("status", str(out)).stdout)
    assert (
        status["phase"] == "complete"
        and (status["cost"].get("audit") or {}).get("candidates", 0) == plan["size"]
    )
    said = "recall audit: none drawn" if not plan["size"] else "recall audit: 1 of 1 searches to run"
    assert said in done.stderr and "recall audit:" in done.stdout, done.stdout


def test_before_its_draw_the_audit_is_priced_from_the_search_and_the_eta_says_so():
    from scanner.cli.watch import _eta
    from scanner.storage.status import audit_ahead

    search = {"eta_s": 100.0, "work_s": 200.0, "s_per_candidate": 5.0, "ends": "plan"}
    assert audit_ahead("25%", search, 2) == pytest.approx(
        0.25 * (200 + 100 * 2) / 2
    )  # of the search at its end
    assert (
        audit_ahead("10m", search, 2) == 300
        and audit_ahead("4", search, 2) == 10
        and audit_ahead("0", search, 2) == 0
    )
    assert audit_ahead("25%", {**search, "eta_s": None}, 1) is None
    snap = {
        "phase": "search",
        "eta_s": 60.0,
        "search": search,
        "audit": {"off": False, "sample": "25%", "eta_s": audit_ahead("25%", search, 2)},
    }
    assert (
        _eta(snap)
        == "1 min 00 s to the end of the verdicts, then about 50 s for the recall audit (--audit-sample 25%)"
    )
    assert (
        _eta({**snap, "audit": {"off": True, "sample": "0", "eta_s": 0.0}})
        == "1 min 00 s to the end of the verdicts"
    )
