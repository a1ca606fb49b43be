"""A recall is stated only from audit searches that committed, and a deleted recall.json is rebuilt,
through the CLI on the tiny model.

A scan killed during its recall audit (the draw saved, no audit unit committed) and relaunched with
--audit-sample 0 must not state "the recall audit searched N spans ... found 0 memorized ... Recall:
100 %" in recall.json, status, the report or the bundle from a draw nothing searched. A recall stands on
committed audit verdicts alone; a changed sample discards the old draw (audit_plan.json included); a
memorized find an audit unit committed stays in the results table whatever the next draw; recall.json,
deleted or edited, is rebuilt by a relaunch."""

import json
import shutil

import pytest
from clirun import cli
from test_audit import CARDS, audit_corpus, rows_of

# No search: every candidate the certificates leave is the audit's to draw, the memorized canary windows among them.
AUDITED = [*CARDS, "--max-candidates", "0", "--audit-sample", "6"]


def scan(corpus, tiny_dir, out, *args):
    done = cli("scan", str(corpus), "--model", str(tiny_dir), "--out", str(out), *args)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return audit_corpus(tmp_path_factory.mktemp("hostile-recall"))


@pytest.fixture(scope="module")
def audited(tiny_dir, corpus):
    """A complete run whose audit committed, memorized finds among its draws."""
    out = corpus.parent / "audited"
    scan(corpus, tiny_dir, out, *AUDITED)
    recall = json.loads((out / "recall.json").read_text())
    assert recall["hits"] > 0, "the audit found memorized spans: what a relaunch must not lose"
    return out


def copy_of(run, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(run, out)
    return out


def no_recall_anywhere(out, tmp_path):
    """recall.json, status, the report and the bundle's denominators state no recall and no audited row."""
    assert not (out / "recall.json").exists()
    status = json.loads(cli("status", str(out)).stdout)
    assert status["recall"] is None and status["phase"] == "complete"
    report = tmp_path / "report.html"
    assert cli("report", str(out), "--out", str(report)).returncode == 0
    page = report.read_text()
    assert "No recall audit in this run" in page and "Recall:" not in page
    bundle = tmp_path / "bundle"
    exported = cli("export", str(out), "--bundle", str(bundle))
    assert exported.returncode == 0, exported.stderr
    denominators = json.loads((bundle / "denominators.json").read_text())
    assert denominators["recall"] is None and denominators["run"]["audited"] == 0


def test_a_relaunch_with_no_audit_after_a_kill_mid_audit_states_no_recall(
    audited, tiny_dir, corpus, tmp_path
):
    out = copy_of(audited, tmp_path)
    # Killed during the audit: its draw saved, no audit unit committed, the results never written.
    for marker in [*(out / "audit" / "done").iterdir(), out / "recall.json", *(out / "done").iterdir()]:
        marker.unlink()
    scan(corpus, tiny_dir, out, *CARDS, "--max-candidates", "0", "--audit-sample", "0")
    no_recall_anywhere(out, tmp_path)
    assert all(r["audit_stratum"] is None for r in rows_of(out).values())
    assert not (out / "audit_plan.json").exists(), "the draw of another sample is discarded"


def test_audit_finds_that_committed_stay_when_the_audit_is_turned_off(audited, tiny_dir, corpus, tmp_path):
    found = {s for s, r in rows_of(audited).items() if r["audit_stratum"] and r["status"] == "memorized"}
    assert found
    out = copy_of(audited, tmp_path)
    scan(corpus, tiny_dir, out, *CARDS, "--max-candidates", "0", "--audit-sample", "0")
    rows = rows_of(out)
    assert all(rows[s]["status"] == "memorized" and rows[s]["prompt"] for s in found), (
        "an audit find is never lost"
    )
    no_recall_anywhere(out, tmp_path)


def test_a_changed_sample_draws_again_from_what_is_still_undecided(audited, tiny_dir, corpus, tmp_path):
    before = rows_of(audited)
    found = {s for s, r in before.items() if r["audit_stratum"] and r["status"] == "memorized"}
    searched = {s for s, r in before.items() if r["audit_stratum"]}
    out = copy_of(audited, tmp_path)
    scan(corpus, tiny_dir, out, *CARDS, "--max-candidates", "0", "--audit-sample", "2")
    plan = json.loads((out / "audit_plan.json").read_text())
    drawn = {span for s in plan["strata"] for span in s["drawn"]}
    assert plan["sample"] == "2" and len(drawn) == 2 and not drawn & searched, (
        "the earlier draw's spans are decided"
    )
    recall = json.loads((out / "recall.json").read_text())
    assert recall["drawn"] == 2 and set(recall["strata_drawn"]) <= {s["name"] for s in plan["strata"]}
    rows = rows_of(out)
    assert all(rows[s]["status"] == "memorized" for s in found)
    assert recall["found"] == sum(
        r["status"] == "memorized" and r["searched_as"] is None for r in rows.values()
    )
    assert {s for s, r in rows.items() if r["audit_stratum"]} == drawn


def test_a_deleted_or_edited_recall_is_rebuilt_by_a_relaunch(audited, tiny_dir, corpus, tmp_path):
    truth = json.loads((audited / "recall.json").read_text())
    out = copy_of(audited, tmp_path)
    (out / "recall.json").unlink()
    scan(corpus, tiny_dir, out, *AUDITED)
    assert json.loads((out / "recall.json").read_text()) == truth
    assert json.loads(cli("status", str(out)).stdout)["recall"] == truth
    (out / "recall.json").write_text(json.dumps({**truth, "recall": 1.0, "missed": 0}))
    scan(corpus, tiny_dir, out, *AUDITED)
    assert json.loads((out / "recall.json").read_text()) == truth
