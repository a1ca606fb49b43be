"""Run directory: real files and real Parquet under tmp_path, resume checks, atomic commits, and writers
killed with SIGKILL at random moments whose relaunch must give the rows of an uninterrupted run."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import random
import signal
import time

import pyarrow as pa
import pytest

from scanner.errors import InputError
from scanner.schema import SCHEMA_VERSION, STATUSES, default_row, results_schema
from scanner.storage.atomic import atomic_write_bytes, atomic_write_json
from scanner.storage.rundir import Plan, RunDir, Shard, run_hash

CONFIG = {"model": "tiny", "span_tokens": 32, "tau": 1.0, "search": {"steps": 150, "top_k": 64}}
FINGERPRINT = "f" * 64


def row(shard: int, i: int) -> dict:
    """One result row with every column filled, deterministic in (shard, i)."""
    status = STATUSES[(shard + i) % len(STATUSES)]
    found = status == "memorized"
    return {
        **default_row(),  # the schema's defaults: a column added there needs no change here
        "doc_id": f"doc-{shard}-{i // 3}",
        "span_id": hashlib.sha256(f"{shard}:{i}".encode()).hexdigest()[:16],
        "char_start": 10 * i,
        "char_end": 10 * i + 40,
        "token_start": 8 * i,
        "token_end": 8 * i + 32,
        "text": f"span {shard}.{i}",
        "target_tokens": 32,
        "target_ids": list(range(32)),
        "status": status,
        "reason": "too short" if status == "skipped" else None,
        "acr": 32 / 5 if found else None,
        "memorized": found,
        "prompt": "a b c d e" if found else None,
        "prompt_ids": [1, 2, 3, 4, 5] if found else None,
        "prompt_tokens": 5 if found else None,
        "tau": 1.0,
        "thresholds": [{"name": "tau", "tau": 1.0, "memorized": found}],
        "greedy_match_rate": 0.5,
        "mean_nll": 1.25,
        "discoverable": found,
        "certificate_tokens": 12,
        "certificate_prompt": "context",
        "verified_generation": found,
        "teacher_forced": found,
        "verify_engine": "hf",
        "min_margin": 0.75,
        "steps": 150,
        "forwards": 1000,
        "screen_s": 0.01,
        "search_s": 0.5,
        "shard": shard,
    }


def shard_table(shard: int, rows: int = 4) -> pa.Table:
    return pa.Table.from_pylist([row(shard, i) for i in range(rows)], schema=results_schema())


def shard_stats(shard: int, rows: int = 4) -> dict:
    counts: dict = {}
    for r in shard_table(shard, rows).column("status").to_pylist():
        counts[r] = counts.get(r, 0) + 1
    return {"rows": rows, "spans": rows, "seconds": 2.0, "status_counts": counts, "host": "x", "ok": True}


def prepared(tmp_path, num_docs: int = 10, docs_per_shard: int = 3, **changes):
    run = RunDir(tmp_path / "run")
    return run, run.prepare({**CONFIG, **changes}, FINGERPRINT, num_docs, docs_per_shard)


def refused(run, *words, config=CONFIG, fingerprint=FINGERPRINT, num_docs=10, docs_per_shard=3) -> str:
    if (run.path / "run_config.json").is_file() and not run.done_shards():
        run.write_shard(0, shard_table(0), shard_stats(0))  # a run with nothing finished starts afresh
    with pytest.raises(InputError) as err:
        run.prepare(config, fingerprint, num_docs, docs_per_shard)
    message = str(err.value)
    for word in words:
        assert word in message, message
    return message


def test_init_does_no_io(tmp_path):
    RunDir(tmp_path / "nowhere")
    assert not (tmp_path / "nowhere").exists()


def test_fresh_prepare_writes_config_and_plan(tmp_path):
    run, plan = prepared(tmp_path)
    assert plan.shards == (Shard(0, 0, 3), Shard(1, 3, 6), Shard(2, 6, 9), Shard(3, 9, 10))
    assert plan.num_docs == 10 and len(plan) == 4
    saved = json.loads((run.path / "run_config.json").read_text())
    assert saved["config"] == CONFIG and saved["run_hash"] == run_hash(saved) and "config_hash" not in saved
    assert saved["corpus_fingerprint"] == FINGERPRINT and saved["docs_per_shard"] == 3
    assert saved["package_version"]
    assert json.loads((run.path / "plan.json").read_text())[1] == {"shard": 1, "doc_start": 3, "doc_end": 6}
    assert all((run.path / folder).is_dir() for folder in ("results", "done", "logs", "stats"))
    assert run.log_path(7) == run.path / "logs" / "shard-00007.log"


def test_resume_with_same_config_returns_saved_plan(tmp_path):
    run, plan = prepared(tmp_path)
    reordered = dict(reversed(list(CONFIG.items())))
    assert RunDir(run.path).prepare(reordered, FINGERPRINT, 10, 3) == plan


def test_saved_plan_wins_over_recomputing(tmp_path):
    run, _ = prepared(tmp_path)
    custom = Plan(shards=(Shard(0, 0, 7), Shard(1, 7, 10)))
    custom.save(run.path / "plan.json")
    assert run.prepare(CONFIG, FINGERPRINT, 10, 3) == custom


def test_changed_config_key_is_refused_naming_it(tmp_path):
    run, _ = prepared(tmp_path)
    message = refused(
        run,
        "another configuration",
        "span_tokens 32 -> 16",
        "new --out",
        config={**CONFIG, "span_tokens": 16, "extra": "x"},
    )
    assert 'extra <absent> -> "x"' in message and "model" not in message
    nested = {**CONFIG, "search": {"steps": 150, "top_k": 32}}
    refused(run, "search.top_k 64 -> 32", config=nested)


def test_a_changed_run_with_nothing_finished_starts_afresh(tmp_path):
    run, _ = prepared(tmp_path)
    changed = {**CONFIG, "span_tokens": 16}
    plan = run.prepare(changed, "1" * 64, 4, 2)
    assert len(plan) == 2 and json.loads((run.path / "run_config.json").read_text())["config"] == changed
    assert RunDir(run.path).prepare(changed, "1" * 64, 4, 2) == plan


def older_schema(run: RunDir, version="1") -> None:
    """Rewrite run_config.json as an acr-scanner of another results schema would have left it."""
    path = run.path / "run_config.json"
    saved = {**json.loads(path.read_text()), "schema_version": version, "package_version": "0.9.0"}
    atomic_write_json(path, {**saved, "run_hash": run_hash(saved)})  # sealed as that acr-scanner sealed it


def test_a_run_of_an_older_results_schema_is_not_resumed(tmp_path):
    run, _ = prepared(tmp_path)
    run.write_shard(0, shard_table(0), shard_stats(0))
    older_schema(run)
    message = refused(
        run, "results schema version 1", f"writes version {SCHEMA_VERSION}", "new --out", "acr-scanner 0.9.0"
    )
    assert "another configuration" not in message  # the configuration itself is unchanged
    assert run.done_shards() == [0]  # refused before anything of the old run was touched


def test_a_run_of_an_older_results_schema_with_nothing_finished_starts_afresh(tmp_path):
    run, _ = prepared(tmp_path)
    older_schema(run)
    assert len(run.prepare(CONFIG, FINGERPRINT, 10, 3)) == 4
    assert json.loads((run.path / "run_config.json").read_text())["schema_version"] == SCHEMA_VERSION


def test_failed_rewrite_of_a_done_shard_leaves_it_pending(tmp_path, monkeypatch):
    run, plan = prepared(tmp_path)
    run.write_shard(0, shard_table(0), shard_stats(0))

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr("scanner.storage.rundir.pq.write_table", crash)
    with pytest.raises(OSError, match="disk full"):
        run.write_shard(0, shard_table(0, rows=2), shard_stats(0, rows=2))
    assert run.pending(plan)[0].shard == 0 and run.read_results().num_rows == 0
    assert not list(run.path.rglob("*.tmp"))
    monkeypatch.undo()
    run.write_shard(0, shard_table(0, rows=2), shard_stats(0, rows=2))
    assert run.read_results().equals(shard_table(0, rows=2))


def test_status_of_a_folder_that_is_not_a_run(tmp_path):
    with pytest.raises(InputError, match="not a run directory"):
        RunDir(tmp_path).status()


def test_changed_docs_per_shard_is_a_config_change(tmp_path):
    run, _ = prepared(tmp_path)
    refused(run, "another configuration", "docs_per_shard 3 -> 5", docs_per_shard=5)


def test_changed_corpus_is_refused(tmp_path):
    run, _ = prepared(tmp_path)
    message = refused(run, "corpus changed", "delete it", fingerprint="0" * 64)
    assert "configuration" not in message
    refused(run, "10 documents but the corpus has 12", num_docs=12)


def test_damaged_or_foreign_directories_are_refused(tmp_path):
    run, _ = prepared(tmp_path)
    (run.path / "plan.json").write_text('[{"shard": 0, "doc_start": 2, "doc_end": 5}]')
    refused(run, "plan.json", "damaged")
    (run.path / "run_config.json").write_text("{not json")
    refused(run, "run_config.json", "damaged")
    (tmp_path / "file").write_text("x")
    refused(RunDir(tmp_path / "file"), "is a file")
    foreign = RunDir(tmp_path / "foreign")
    (foreign.path / "done").mkdir(parents=True)
    (foreign.path / "done" / "00000").write_text("{}")
    refused(foreign, "no run_config.json")


def test_bad_docs_per_shard_and_config(tmp_path):
    with pytest.raises(InputError, match="docs_per_shard 0"):
        prepared(tmp_path, docs_per_shard=0)
    with pytest.raises(TypeError, match="JSON-able"):
        RunDir(tmp_path / "other").prepare({"model": object()}, FINGERPRINT, 10, 3)
    run, _ = prepared(tmp_path)
    with pytest.raises(TypeError, match="JSON-able"):
        run.prepare({"tau": float("nan")}, FINGERPRINT, 10, 3)
    assert not (tmp_path / "other").exists()


def test_pending_excludes_done_shards(tmp_path):
    run, plan = prepared(tmp_path)
    run.write_shard(2, shard_table(2), shard_stats(2))
    run.write_shard(0, shard_table(0), shard_stats(0))
    assert [s.shard for s in run.pending(plan)] == [1, 3]
    assert (run.path / "done" / "00002").exists() and (run.path / "stats" / "00002.json").exists()


def test_written_shard_reads_back_with_field_docs_and_provenance(tmp_path):
    run, _ = prepared(tmp_path)
    table = shard_table(1)
    run.write_shard(1, table.replace_schema_metadata({b"model": b"tiny"}), shard_stats(1))
    back = run.read_results()
    assert back.equals(table) and back.schema.metadata[b"model"] == b"tiny"
    assert back.schema.field("acr").metadata[b"doc"]
    assert run.read_results(columns=["span_id", "status"]).column_names == ["span_id", "status"]
    with pytest.raises(InputError, match="'txt'|txt"):
        run.read_results(columns=["txt"])


def test_empty_shard_and_empty_run(tmp_path):
    run, plan = prepared(tmp_path)
    assert run.read_results().num_rows == 0 and run.read_results().schema.equals(results_schema())
    run.write_shard(0, results_schema().empty_table(), {"rows": 0, "seconds": 0.5})
    assert run.read_results().num_rows == 0 and [s.shard for s in run.pending(plan)] == [1, 2, 3]


def test_file_without_marker_is_pending_and_rewrite_leaves_one_copy(tmp_path):
    run, plan = prepared(tmp_path)
    for shard in range(2):
        run.write_shard(shard, shard_table(shard), shard_stats(shard))
    # kill -9 between the rename of the shard file and the marker: the file is there, the marker is not.
    os.unlink(run.done_path(1))
    assert [s.shard for s in run.pending(plan)] == [1, 2, 3]
    assert run.read_results().num_rows == 4
    run.write_shard(1, shard_table(1), shard_stats(1))
    run.write_shard(1, shard_table(1), shard_stats(1))
    results = run.read_results()
    assert results.num_rows == 8 and len(set(results.column("span_id").to_pylist())) == 8
    assert sorted(p.name for p in (run.path / "results").iterdir()) == [
        "part-00000.parquet",
        "part-00001.parquet",
    ]


def test_stray_temp_files_are_ignored_and_cleaned(tmp_path):
    run, _ = prepared(tmp_path)
    run.write_shard(0, shard_table(0), shard_stats(0))
    strays = [
        run.path / "results" / ".part-00001.parquet.123.abcd.tmp",
        run.path / "done" / ".00001.1.a.tmp",
        run.path / "stats" / ".00001.json.1.b.tmp",
        run.path / ".plan.json.1.c.tmp",
    ]
    for stray in strays:
        stray.write_bytes(b"half a file")
    assert run.read_results().equals(shard_table(0)) and run.done_shards() == [0]
    assert run.merge_stats()["shards_done"] == 1
    run.prepare(CONFIG, FINGERPRINT, 10, 3)
    assert not any(stray.exists() for stray in strays)
    assert run.result_path(0).exists()


def test_write_shard_rejects_wrong_schema_and_wrong_shard(tmp_path):
    run, _ = prepared(tmp_path)
    with pytest.raises(ValueError, match="results schema"):
        run.write_shard(0, shard_table(0).drop_columns(["acr"]), {})
    retyped = shard_table(0).set_column(2, "char_start", pa.array([0, 1, 2, 3], pa.int32()))
    with pytest.raises(ValueError, match="char_start"):
        run.write_shard(0, retyped, {})
    with pytest.raises(ValueError, match="shard values"):
        run.write_shard(1, shard_table(0), {})
    assert run.done_shards() == [] and not run.result_path(0).exists()


def test_atomic_helpers_replace_whole_files(tmp_path):
    target = tmp_path / "x.json"
    atomic_write_json(target, {"a": 1})
    atomic_write_json(target, {"b": [1, 2]})
    assert json.loads(target.read_text()) == {"b": [1, 2]}
    atomic_write_bytes(tmp_path / "y", b"\x00\x01")
    assert (tmp_path / "y").read_bytes() == b"\x00\x01"
    with pytest.raises(TypeError):
        atomic_write_json(target, {"live": object()})
    assert json.loads(target.read_text()) == {"b": [1, 2]}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.json", "y"]


def test_status_before_any_shard_has_no_eta(tmp_path):
    run, _ = prepared(tmp_path)
    status = run.status()
    assert status["shards_done"] == 0 and status["shards_total"] == 4
    assert status["eta_s"] is None and status["spans_per_s"] is None and status["status_counts"] == {}


def test_merge_stats_and_status_math(tmp_path):
    run, _ = prepared(tmp_path)
    run.write_shard(
        0,
        shard_table(0),
        {
            "rows": 4,
            "spans": 4,
            "seconds": 2.0,
            "status_counts": {"memorized": 1, "not_memorized": 3},
            "host": "a",
        },
    )
    run.write_shard(
        1,
        shard_table(1),
        {
            "rows": 4,
            "spans": 4,
            "seconds": 6.0,
            "status_counts": {"not_memorized": 2, "skipped": 2},
            "ok": True,
        },
    )
    run.stats_path(2).write_text(json.dumps({"rows": 100, "seconds": 100.0}))  # killed shard: not done
    merged = run.merge_stats()
    assert merged == {
        "rows": 8,
        "spans": 8,
        "seconds": 8.0,
        "shards_done": 2,
        "shards_total": 4,
        "status_counts": {"memorized": 1, "not_memorized": 5, "skipped": 2},
    }
    assert json.loads((run.path / "stats.json").read_text()) == merged
    status = run.status()
    assert status["rows"] == 8 and status["status_counts"]["not_memorized"] == 5
    assert status["elapsed_s"] == 8.0 and status["spans_per_s"] == pytest.approx(1.0)
    assert status["eta_s"] == pytest.approx(8.0)  # 2 shards left at 4 s each
    assert run.status(workers=2)["eta_s"] == pytest.approx(4.0)
    for shard in (2, 3):
        run.write_shard(shard, shard_table(shard), shard_stats(shard))
    assert run.status()["eta_s"] == 0 and run.pending(run.load_plan()) == []


# ---------------------------------------------------------------- SIGKILL at random moments

KILL_PLAN = {"num_docs": 120, "docs_per_shard": 2}


def _writer(path: str, ready) -> None:
    """A launch of the scan: prepare, then commit every pending shard until done (or killed)."""
    run = RunDir(path)
    plan = run.prepare(CONFIG, FINGERPRINT, KILL_PLAN["num_docs"], KILL_PLAN["docs_per_shard"])
    ready.set()
    for shard in run.pending(plan):
        run.write_shard(
            shard.shard, shard_table(shard.shard, rows=5 + shard.shard % 3), shard_stats(shard.shard)
        )


def _check_consistent(run: RunDir) -> None:
    done = run.done_shards()
    results = run.read_results()
    expected = pa.concat_tables([shard_table(s, rows=5 + s % 3) for s in done]) if done else None
    assert results.num_rows == (expected.num_rows if done else 0)
    if done:
        assert results.equals(expected)


def _wait_for_done(run: RunDir, count: int, child) -> None:
    deadline = time.monotonic() + 60
    while len(run.done_shards()) < count and child.is_alive():
        assert time.monotonic() < deadline, "the writer made no progress"
        time.sleep(0.001)


def test_sigkilled_writers_then_relaunch_equal_an_uninterrupted_run(tmp_path):
    context = multiprocessing.get_context("spawn")  # fork after pyarrow's thread pools can deadlock
    clean, killed = RunDir(tmp_path / "clean"), RunDir(tmp_path / "killed")
    _writer(str(clean.path), context.Event())
    rng, kills = random.Random(1234), []
    for _ in range(8):
        ready = context.Event()
        child = context.Process(target=_writer, args=(str(killed.path), ready))
        child.start()
        assert ready.wait(60), "the writer did not start"
        # Let it commit a few shards, then kill it at a random point inside the next writes.
        _wait_for_done(killed, len(killed.done_shards()) + rng.randint(0, 6), child)
        time.sleep(rng.uniform(0.0, 0.01))
        os.kill(child.pid, signal.SIGKILL)
        child.join(30)
        kills.append((child.exitcode, len(killed.done_shards())))
        _check_consistent(killed)
    assert any(code == -signal.SIGKILL for code, _ in kills) and kills[-1][1] < 60, kills
    _writer(str(killed.path), context.Event())  # the relaunch
    results = killed.read_results()
    assert results.equals(clean.read_results())
    span_ids = results.column("span_id").to_pylist()
    assert len(span_ids) == len(set(span_ids)) == sum(5 + s % 3 for s in range(60))
    assert not list(killed.path.rglob("*.tmp"))
    assert killed.merge_stats() == clean.merge_stats()


def test_object_store_uris_are_refused_with_the_fix_and_file_uris_work(tmp_path):
    with pytest.raises(InputError, match=r"'s3://bucket/run' is a s3:// URI.*NFS.*copy results/"):
        RunDir("s3://bucket/run")
    assert RunDir(f"file://{tmp_path}/run").path == tmp_path / "run"
