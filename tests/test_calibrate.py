"""Memorized or merely predictable, through the CLI on tiny models trained here.

The model under test memorized the planted canaries and also learned predictable text: counting, a
refrain, a boilerplate line that opens many documents (TinySpec.predictable_docs). The reference model
learned the same predictable text but never saw a canary; the suite's default tiny model (tiny_dir)
saw the canaries and no predictable text. Counting and the refrain reach ACR > 1 like the canaries;
calibration must mark them predictable and leave the canaries memorized, controls untouched."""

import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from clirun import cli

from scanner.config import CalibrationConfig
from scanner.errors import InputError
from scanner.measures import calibration as calibrate
from scanner.measures.calibration import ReferenceEvidence, SelfEvidence
from scanner.results.export import select_rows
from scanner.studies.tiny import BOILERPLATE, CANARIES, REFRAIN, TinySpec, build_tiny, counting, salad

FAST = ["--steps", "40", "--candidates", "64", "--top-k", "64", "--restarts", "0"]
# As the model continues them: counting and the refrain go on past any end, so no final stop.
COUNTING_TEXT = counting(1, 14)[:-1]
REFRAIN_TEXT = REFRAIN.rsplit(",", 3)[0]
SPEC = TinySpec(predictable_docs=200)
REFERENCE_SPEC = TinySpec(canaries=(), predictable_docs=200, seed=1, documents=200, steps=300)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    # ACR_TINY_DIR (conftest.py): reuse across sessions, beside the suite's tiny model.
    shared = os.environ.get("ACR_TINY_DIR")
    root = Path(f"{shared}-calibrate") if shared else tmp_path_factory.mktemp("calibrate")
    return build_tiny(root / "model", SPEC), build_tiny(root / "reference", REFERENCE_SPEC)


def acr(model, *args) -> dict[str, dict]:
    done = cli("acr", "--model", str(model), "--json", *FAST, *args)
    assert done.returncode == 0, done.stderr
    return {r["target"]: r for r in map(json.loads, done.stdout.splitlines())}


def test_decision_rules():
    config = CalibrationConfig(nll_margin=0.5)
    quiet = SelfEvidence(trials=8, hits=1, best_match=0.6, unconditional_match=0.1)
    assert calibrate.decide(quiet, None, config) == (False, None)
    assert calibrate.decide(SelfEvidence(8, 2, 1.0, 0.0), None, config)[0]  # 2/8 = the 25 % share
    assert "template alone" in calibrate.decide(SelfEvidence(8, 0, 0.0, 0.5), None, config)[1]
    ref = ReferenceEvidence("R", False, None, 0.1, nll=0.9, model_nll=0.3, seconds=0.0)
    assert not calibrate.decide(None, ref, config)[0]  # 0.9 > 0.3 + 0.5
    near = ReferenceEvidence("R", False, False, 0.1, nll=0.8, model_nll=0.3, seconds=0.0)
    assert "nearly as likely" in calibrate.decide(None, near, config)[1]
    assert (
        "natural prefix"
        in calibrate.decide(None, ReferenceEvidence("R", False, True, 1.0, None, None, 0.0), config)[1]
    )
    assert calibrate.leading_share("abcd", "abxx") == 0.5 and calibrate.leading_share("ab", "abc") == 1.0
    with pytest.raises(InputError, match="calibration-prompts"):
        CalibrationConfig(random_prompts=-1)


def test_acr_with_a_reference_that_knows_counting_but_not_the_canaries(models):
    model, reference = models
    row = acr(model, "--reference-model", str(reference), "--calibration-prompts", "2", COUNTING_TEXT)[
        COUNTING_TEXT
    ]
    assert row["memorized"] and row["acr"] > 1
    assert (
        row["predictable"]
        and not row["calibrated_memorized"]
        and "reference model" in row["predictable_reason"]
    )
    assert row["reference_model"] == str(reference) and row["reference_s"] > 0 and row["mean_nll"] is not None
    assert row["random_prompt_trials"] == 2 and row["random_prompt_hits"] == 0 and row["gzip_ratio"] > 0
    bad = cli("acr", "--model", str(model), "--reference-model", str(model) + "-missing", "x y z")
    assert bad.returncode == 2 and "--reference-model" in bad.stderr and "-missing" in bad.stderr


def test_a_reference_that_shares_the_canaries_marks_them_predictable(models, tiny_dir):
    model, _ = models
    shared = acr(model, "--reference-model", str(tiny_dir), "--calibration-prompts", "0", CANARIES[2])[
        CANARIES[2]
    ]
    assert shared["memorized"] and shared["predictable"] and not shared["calibrated_memorized"]
    assert "reference model" in shared["predictable_reason"] and shared["random_prompt_trials"] is None


@pytest.fixture(scope="module")
def scanned(models, tmp_path_factory):
    import pyarrow as pa

    model, reference = models
    root = tmp_path_factory.mktemp("calibrated-scan")
    rng = __import__("random").Random(11)
    docs = [
        f"{salad(rng, 8)}\n{CANARIES[0]}\n{salad(rng, 6)}",
        f"{salad(rng, 8)}\n{counting(1, 20)}\n{salad(rng, 6)}",
        f"{salad(rng, 8)}\n{REFRAIN}\n{salad(rng, 6)}",
        f"{BOILERPLATE}\n{salad(rng, 10)}",
        salad(rng, 20),
    ]
    pq.write_table(
        pa.table({"id": ["canary", "counting", "refrain", "boilerplate", "control"], "text": docs}),
        root / "corpus.parquet",
    )
    out = root / "run"
    done = cli(
        "scan",
        str(root / "corpus.parquet"),
        "--model",
        str(model),
        "--out",
        str(out),
        "--span-tokens",
        "12",
        "--stride",
        "6",
        "--context-tokens",
        "16",
        "--min-match-rate",
        "0.95",
        "--calibration-prompts",
        "4",
        "--reference-model",
        str(reference),
        *FAST,
    )
    assert done.returncode == 0, done.stderr
    return out, pq.read_table(out / "results").to_pylist()


def test_scan_calibrates_memorized_spans(scanned):
    _, rows = scanned
    by_doc = {
        d: [r for r in rows if r["doc_id"] == d and r["memorized"]]
        for d in ("canary", "counting", "refrain", "boilerplate", "control")
    }
    assert by_doc["canary"] and all(
        r["calibrated_memorized"] and r["predictable"] is False for r in by_doc["canary"]
    )
    for doc in ("counting", "refrain", "boilerplate"):
        assert by_doc[doc], doc
        assert all(r["predictable"] and not r["calibrated_memorized"] for r in by_doc[doc]), doc
        assert all(r["random_prompt_trials"] == 4 for r in by_doc[doc])
        # a copy of a span searched elsewhere (the same tokens) takes its verdict, not its seconds
        assert all(
            r["reference_s"] > 0 if r["searched_as"] is None else r["reference_s"] is None
            for r in by_doc[doc]
        )
    assert any(
        "template alone" in r["predictable_reason"] for r in by_doc["boilerplate"]
    )  # no reference needed
    assert not by_doc["control"]
    unflagged = [r for r in rows if not r["memorized"]]
    assert all(r["predictable"] is None and not r["calibrated_memorized"] for r in unflagged)
    assert all(r["smaz_ratio"] is not None for r in rows if r["status"] in ("memorized", "not_memorized"))


def test_export_report_and_verify_show_both_counts(scanned, tmp_path):
    out, rows = scanned
    paper = sum(r["memorized"] for r in rows)
    kept = sum(r["calibrated_memorized"] for r in rows)
    assert 0 < kept < paper
    done = cli("export", str(out), "--out", str(tmp_path / "all.jsonl"))
    assert (
        done.returncode == 0
        and f"memorized {paper} " in done.stdout
        and f"calibrated memorized {kept} " in done.stdout
    )
    assert len((tmp_path / "all.jsonl").read_text().splitlines()) == paper
    done = cli("export", str(out), "--out", str(tmp_path / "calibrated.jsonl"), "--calibrated")
    exported = [json.loads(line) for line in (tmp_path / "calibrated.jsonl").read_text().splitlines()]
    assert done.returncode == 0 and len(exported) == kept and {r["doc_id"] for r in exported} == {"canary"}
    assert all(r["predictable"] is False and "reference_nll" in r for r in exported)
    table = pq.read_table(out / "results")
    at_two = select_rows(table, "2", calibrated=True)  # --tau keeps working beside --calibrated
    assert set(at_two["span_id"].to_pylist()) <= {r["span_id"] for r in rows if r["calibrated_memorized"]}
    assert all(t > 2 for t in at_two["acr"].to_pylist())
    assert cli("report", str(out), "--out", str(tmp_path / "r.html")).returncode == 0
    page = (tmp_path / "r.html").read_text()
    assert "calibrated memorized (memorized and not predictable)" in page and "<b>predictable</b>" in page
    verified = cli("verify", str(out))
    assert verified.returncode == 0 and f"calibrated memorized {kept} " in verified.stdout
