"""`acr-scan status RUN --watch`: the live view, through the CLI, on run directories made here.

The run directories are written with RunDir as a scan writes them (plan, shard results, stats, done
markers) and the markers' times are set, so throughput and ETA have known values."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from scanner.schema import results_schema
from scanner.storage.rundir import RunDir

NOW_AGO = {0: 100.0, 1: 90.0, 2: 30.0}  # seconds before the test when each shard was committed


def cli(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "scanner", *args], capture_output=True, text=True, timeout=timeout)


def commit(run: RunDir, shard: int, memorized: int) -> None:
    counts = {"memorized": memorized, "screened_out": 10 - memorized}
    stats = {"documents": 3, "spans": 10, "rows": 10, "status_counts": counts, "candidates": memorized,
             "memorized": memorized, "seconds": 4.0}
    run.write_shard(shard, results_schema().empty_table(), stats)
    stamp = time.time() - NOW_AGO[shard]
    os.utime(run.done_path(shard), (stamp, stamp))


@pytest.fixture
def running(tmp_path):
    """A run of 9 documents in 3 shards, two of them done (committed 100 and 90 seconds ago)."""
    run = RunDir(tmp_path / "run")
    run.prepare({"corpus": "c"}, "f" * 64, num_docs=9, docs_per_shard=3)
    commit(run, 0, memorized=1)
    commit(run, 1, memorized=2)
    return run


def test_watch_shows_phase_progress_memorized_throughput_and_eta(running):
    out = cli("status", str(running.path), "--watch", "--iterations", "2", "--interval", "0.1")
    assert out.returncode == 0, out.stderr
    frames = out.stdout.strip().split("\n\n")
    assert len(frames) == 2
    frame = frames[-1]
    assert "phase: scanning" in frame
    assert "shards      2/3 done" in frame and "documents   6/9 done" in frame
    assert "spans       20 done (memorized 3, screened_out 17)" in frame
    assert "memorized   3 so far" in frame
    # The last commit came 10 s after the one before it: 10 spans and 3 documents in 10 s.
    assert "1.0 spans/s, 0.30 documents/s (wall clock, last 1 shard commits)" in frame
    assert "ETA         10 s" in frame  # 3 documents left at 0.3 per second
    assert re.search(r"last commit 1 min \d\d s ago", frame)  # 90 s, and the seconds this test took


def test_watch_of_a_complete_run_shows_one_frame_and_ends(running):
    commit(running, 2, memorized=0)
    out = cli("status", str(running.path), "--watch", "--interval", "0.1")
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("phase: complete") == 1 and "ETA         finished" in out.stdout
    assert "shards      3/3 done" in out.stdout and "memorized   3 so far" in out.stdout
    # 20 spans in the 70 s between the first and the last commit.
    assert "0.3 spans/s" in out.stdout


def test_plain_status_json_is_unchanged_by_watch(running):
    status = json.loads(cli("status", str(running.path)).stdout)
    assert set(status) == {"shards_done", "shards_total", "rows", "status_counts", "elapsed_s", "spans_per_s",
                           "eta_s", "phases"}
    assert status["phases"]["screened_shards"] == 0 and status["phases"]["shards_total"] == 3
    assert status["shards_done"] == 2 and status["rows"] == 20


def test_ctrl_c_leaves_the_watch_with_exit_0(running):
    proc = subprocess.Popen([sys.executable, "-m", "scanner", "status", str(running.path), "--watch",
                             "--interval", "0.2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()  # the first frame is out: the command is inside its loop
        assert "phase: scanning" in first
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "stopped watching" in rest and "Traceback" not in err


def test_watch_waits_for_a_run_that_has_no_plan_yet_and_refuses_a_missing_one(tmp_path):
    (tmp_path / "run").mkdir()
    out = cli("status", str(tmp_path / "run"), "--watch", "--iterations", "1")
    assert out.returncode == 0 and "phase: starting (no shard plan yet)" in out.stdout
    missing = cli("status", str(tmp_path / "nope"), "--watch")
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    bad = cli("status", str(tmp_path / "run"), "--watch", "--interval", "0")
    assert bad.returncode == 2 and "--interval 0.0 must be > 0" in bad.stderr
