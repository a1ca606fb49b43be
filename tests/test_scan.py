"""The corpus scan end to end through the CLI: scan, relaunch (resume), status, export, report, verify.

Small settings keep it to seconds on 2 cores: 12-token spans every 2 tokens (so each planted canary
holds whole spans), a strict screen (only spans the model reproduces from their context or with a
certificate are searched), short GCG budgets."""

import json
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from clirun import cli

from scanner.cli.demo import demo_corpus
from scanner.schema import WALL_CLOCK
from scanner.studies.tiny import CANARIES

SCAN = [
    "--span-tokens",
    "12",
    "--stride",
    "2",
    "--context-tokens",
    "16",
    "--docs-per-shard",
    "3",
    "--min-match-rate",
    "0.95",
    "--steps",
    "40",
    "--candidates",
    "64",
    "--top-k",
    "64",
    "--restarts",
    "0",
]


@pytest.fixture(scope="module")
def scanned(tiny_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("scan")
    corpus = demo_corpus(root / "corpus.parquet")
    out = root / "run"
    first = cli("scan", str(corpus), "--model", str(tiny_dir), "--out", str(out), *SCAN)
    assert first.returncode == 0, first.stderr
    return corpus, out, first


def test_scan_writes_one_row_per_span_and_finds_the_canaries(scanned):
    corpus, out, first = scanned
    table = pq.read_table(out / "results").to_pylist()
    assert len({r["span_id"] for r in table}) == len(table), "no duplicate rows"
    assert {r["status"] for r in table} <= {"memorized", "not_memorized", "screened_out", "skipped"}
    assert [r["reason"] for r in table if r["status"] == "skipped"] == ["null text"]
    texts = pq.read_table(corpus).column("text").to_pylist()
    for row in table:
        assert (
            row["text"]
            == (texts[int(row["doc_id"].split("-")[1])] or "")[row["char_start"] : row["char_end"]]
        )
    flagged = [r for r in table if r["memorized"]]
    assert flagged and all(r["verified_generation"] and r["acr"] > 1 for r in flagged)
    assert all(any(r["text"].strip() in c for c in CANARIES) for r in flagged), "nothing outside the canaries"
    assert {r["doc_id"] for r in flagged} == {"doc-0", "doc-1", "doc-2", "doc-3"}  # every planted canary
    assert any(r["certificate_tokens"] is not None for r in table)
    assert "results in" in first.stdout
    provenance = json.loads((out / "provenance.json").read_text())
    assert provenance["model"] and provenance["package_version"]
    assert len(provenance["tokenizer_hash"]) == 64 and provenance["config_hash"]
    meta = pq.read_schema(next((out / "results").glob("part-*.parquet"))).metadata
    assert meta[b"tokenizer_hash"].decode() == provenance["tokenizer_hash"]


def test_relaunch_resumes_and_a_changed_configuration_is_refused(scanned, tiny_dir):
    corpus, out, _ = scanned
    before = pq.read_table(out / "results")
    again = cli("scan", str(corpus), "--model", str(tiny_dir), "--out", str(out), *SCAN)
    assert again.returncode == 0, again.stderr
    assert pq.read_table(out / "results").equals(before)
    changed = cli(
        "scan", str(corpus), "--model", str(tiny_dir), "--out", str(out), *SCAN[:-2], "--restarts", "1"
    )
    assert (
        changed.returncode == 2 and "another configuration" in changed.stderr and "restarts" in changed.stderr
    )


def test_status_export_report_and_verify(scanned, tmp_path):
    _, out, _ = scanned
    status = json.loads(cli("status", str(out)).stdout)
    assert status["shards_done"] == status["shards_total"] == 3 and status["eta_s"] == 0
    bad = cli("status", str(out), "--workers", "0")
    assert bad.returncode == 2 and "workers 0 must be >= 1" in bad.stderr
    export = tmp_path / "flagged.jsonl"
    assert cli("export", str(out), "--out", str(export)).returncode == 0
    rows = [json.loads(line) for line in export.read_text().splitlines()]
    assert rows and all(r["prompt"] is not None and r["acr"] > 1 for r in rows)
    report = tmp_path / "report.html"
    assert cli("report", str(out), "--out", str(report)).returncode == 0
    assert "<svg" in report.read_text() and "doc-0" in report.read_text()
    verified = cli("verify", str(out))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert f"{len(rows)}/{len(rows)} flagged spans reproduce" in verified.stdout


def test_bad_corpus_is_refused_before_the_model_loads(tmp_path, tiny_dir):
    bad = tmp_path / "notes.txt"
    bad.write_text("not parquet")
    out = cli("scan", str(bad), "--model", "/no/such/model", "--out", str(tmp_path / "run"))
    assert out.returncode == 2 and "notes.txt" in out.stderr and "--model" not in out.stderr


def _comparable(table):
    """Rows by span_id without the wall-clock columns, which differ between any two runs."""
    rows = [{k: v for k, v in r.items() if k not in WALL_CLOCK} for r in table.to_pylist()]
    return sorted(rows, key=lambda r: r["span_id"])


def test_kill_9_at_several_points_then_relaunch_equals_an_uninterrupted_run(scanned, tiny_dir, tmp_path):
    import signal
    import time

    _, reference, _ = scanned
    corpus = demo_corpus(tmp_path / "corpus.parquet")  # same content as the reference run's corpus
    out = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "scanner",
        "scan",
        str(corpus),
        "--model",
        str(tiny_dir),
        "--out",
        str(out),
        *SCAN,
    ]
    kills = 0
    for delay in (1.5, 4.0, 6.0, 8.0):  # before the model loads, then at different shards
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait(timeout=60)
    assert kills >= 2, "the scan finished before it could be interrupted; the test lost its point"
    final = cli("scan", str(corpus), "--model", str(tiny_dir), "--out", str(out), *SCAN)
    assert final.returncode == 0, final.stderr
    got, want = pq.read_table(out / "results"), pq.read_table(reference / "results")
    assert got.num_rows == want.num_rows and len(set(got.column("span_id").to_pylist())) == got.num_rows
    assert _comparable(got) == _comparable(want)


def test_spans_sharing_forwards_give_the_same_table(scanned, tiny_dir, tmp_path):
    corpus, reference, _ = scanned
    out = tmp_path / "run"
    done = cli(
        "scan", str(corpus), "--model", str(tiny_dir), "--out", str(out), *SCAN, "--targets-per-forward", "3"
    )
    assert done.returncode == 0, done.stderr
    got, want = pq.read_table(out / "results"), pq.read_table(reference / "results")
    # Rows equal but for what float rounding of other batch shapes can change: the prompt GCG found.
    searched = (
        "acr",
        "prompt",
        "prompt_ids",
        "prompt_tokens",
        "thresholds",
        "min_margin",
        "steps",
        "forwards",
        "rejected_matches",
        "generation_margin",
        "generation_margin_at",
        "fragile",
    )
    assert [{k: v for k, v in r.items() if k not in searched} for r in _comparable(got)] == [
        {k: v for k, v in r.items() if k not in searched} for r in _comparable(want)
    ]
    assert all(r["verified_generation"] and r["acr"] > 1 for r in got.to_pylist() if r["memorized"])
    assert got.schema.metadata[b"targets_per_forward"] == b"3"
    assert want.schema.metadata[b"targets_per_forward"] == b"1"  # auto on the CPU
    shards = [pq.read_table(p).column("status").to_pylist() for p in sorted((out / "results").glob("part-*"))]
    assert max(s.count("memorized") + s.count("not_memorized") for s in shards) > 3, "several spans shared"


def test_max_candidates_searches_the_best_evidence_corpus_wide(tiny_dir, tmp_path):
    """--max-candidates counts searched candidates, best screen evidence first across the corpus;
    certificate-settled spans cost none of it; the rest stay not_searched with the reason."""
    from scanner.measures.budget import evidence_key

    corpus = demo_corpus(tmp_path / "corpus.parquet")
    out = tmp_path / "run"
    args = [*SCAN[:8], "--min-match-rate", "0.8", "--steps", "10", *SCAN[12:], "--max-candidates", "1"]
    done = cli("scan", str(corpus), "--model", str(tiny_dir), "--out", str(out), *args)
    assert done.returncode == 0, done.stderr
    rows = pq.read_table(out / "results").to_pylist()
    searched = [r for r in rows if r["acr_kind"] == "searched_min"]
    waiting = [r for r in rows if r["status"] == "not_searched"]
    assert len(searched) == 1 and len(waiting) > 3
    assert all(r["reason"] == "candidate budget spent (--max-candidates)" for r in waiting)
    # Windows beside a span a certificate found wait behind the rest (measures/budget.py fresh_first).
    waits = set(json.loads((out / "search_plan.json").read_text())["waits"])
    assert all(evidence_key(searched[0]) < evidence_key(r) for r in waiting if r["span_id"] not in waits)
    assert any(r["acr_kind"] == "certificate_bound" and r["memorized"] for r in rows)


@pytest.mark.parametrize(
    "table, args, message",
    [
        ({"id": ["a"], "txt": ["hello"]}, [], "column 'text' not found"),
        ({"id": ["a"], "text": [b"\x00\x01binary"]}, [], "not a string type"),
        ({"id": ["a", "a"], "text": ["x", "y"]}, [], "--allow-duplicate-ids"),
        ({"id": [], "text": []}, [], "has no rows"),
    ],
    ids=["missing-column", "binary-column", "duplicate-ids", "empty-corpus"],
)
def test_bad_corpora_exit_2_before_the_model_loads(tmp_path, table, args, message):
    import pyarrow as pa

    path = tmp_path / "c.parquet"
    types = {
        "id": pa.string(),
        "text": pa.binary() if table.get("text") and isinstance(table["text"][0], bytes) else pa.string(),
        "txt": pa.string(),
    }
    pq.write_table(pa.table({k: pa.array(v, type=types[k]) for k, v in table.items()}), path)
    out = cli("scan", str(path), "--model", "/no/such/model", "--out", str(tmp_path / "run"), *args)
    assert out.returncode == 2 and message in out.stderr, out.stderr


def test_a_document_longer_than_the_model_context_is_scanned_in_spans(tiny_dir, tmp_path):
    import pyarrow as pa

    from scanner.studies.tiny import salad

    long_text = salad(__import__("random").Random(1), 1500)  # thousands of tokens; the model holds 256
    path = tmp_path / "long.parquet"
    pq.write_table(pa.table({"id": ["long"], "text": [long_text]}), path)
    out = cli(
        "scan",
        str(path),
        "--model",
        str(tiny_dir),
        "--out",
        str(tmp_path / "run"),
        "--span-tokens",
        "12",
        "--context-tokens",
        "16",
        "--min-match-rate",
        "0.95",
        "--steps",
        "20",
        "--restarts",
        "0",
    )
    assert out.returncode == 0, out.stderr
    rows = pq.read_table(tmp_path / "run" / "results").to_pylist()
    assert len(rows) > 200 and rows[-1]["token_end"] > 2000
    assert all(r["text"] == long_text[r["char_start"] : r["char_end"]] for r in rows)


def test_kept_columns_logs_and_failed_rows_are_retried(tiny_dir, tmp_path, monkeypatch):
    import pyarrow as pa

    from scanner.config import (
        CalibrationConfig,
        CorpusConfig,
        ModelConfig,
        ScanConfig,
        ScreenConfig,
        SearchConfig,
        SpanConfig,
    )
    from scanner.run.driver import run_scan

    corpus = demo_corpus(tmp_path / "c.parquet")
    table = pq.read_table(corpus)
    pq.write_table(table.append_column("title", pa.array([f"t{i}" for i in range(table.num_rows)])), corpus)
    config = ScanConfig(
        corpus=CorpusConfig(path=str(corpus), keep_columns=("title",)),
        model=ModelConfig(model=str(tiny_dir), device="cpu"),
        spans=SpanConfig(span_tokens=12, stride=2),
        screen=ScreenConfig(context_tokens=16),
        min_match_rate=0.8,
        docs_per_shard=3,
        max_candidates=2,
        search=SearchConfig(decide_steps=5, shrink_steps=5, restarts=0),
        calibration=CalibrationConfig(random_prompts=0),
        audit_sample=0,
    )  # the search's retries only
    import scanner.search.miniprompt as miniprompt

    real = miniprompt.effective_cap  # the first call inside every span's search
    monkeypatch.setattr(
        miniprompt, "effective_cap", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("boom"))
    )
    out = tmp_path / "run"
    run_scan(config, str(out))
    rows = pq.read_table(out / "results").to_pylist()
    assert [r["status"] for r in rows].count("failed") == 2 and all(
        "boom" in r["reason"] for r in rows if r["status"] == "failed"
    )
    assert json.loads(rows[0]["extra"]) == {"title": "t0"}
    assert "span" in (out / "logs" / "search-00000.log").read_text()  # the failure was logged per unit
    monkeypatch.setattr(miniprompt, "effective_cap", real)
    run_scan(config, str(out))  # relaunch: the units with failed rows run again
    rows = pq.read_table(out / "results").to_pylist()
    assert [r["status"] for r in rows].count("failed") == 0
    assert [r["acr_kind"] for r in rows].count("searched_min") == 2
