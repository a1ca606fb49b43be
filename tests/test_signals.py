"""Exit codes a batch system can trust: SIGTERM or SIGUSR1 (a time limit, a preemption, a
pod's end) mid-search stops the scan with exit 75, the lock released, and the relaunch ends in the
table of an uninterrupted run; a scan that leaves failed rows exits 5 naming them, and the relaunch
that retries them exits 0. Slow candidates (word salad, every span searched whole) keep a search
running for seconds, long enough to signal it."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from cliopts import salad_search
from clirun import cli

from scanner.schema import WALL_CLOCK
from scanner.studies.tiny import salad

# Two candidates in one unit; each search runs its whole schedule (about a second on an idle core).
SLOW = salad_search(5, 2, "--docs-per-shard", "1")


def comparable(run: Path) -> list[dict]:
    rows = [
        {k: v for k, v in r.items() if k not in WALL_CLOCK}
        for r in pq.read_table(run / "results").to_pylist()
    ]
    return sorted(rows, key=lambda r: r["span_id"])


@pytest.fixture(scope="module")
def uninterrupted(tiny_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("signals")
    corpus = root / "slow.parquet"
    rng = random.Random(11)
    pq.write_table(pa.table({"id": ["d0"], "text": [salad(rng, 12)]}), corpus)
    done = cli("scan", str(corpus), "--model", str(tiny_dir), "--out", str(root / "ref"), *SLOW)
    assert done.returncode == 0, done.stderr
    rows = comparable(root / "ref")
    assert len([r for r in rows if r["status"] == "not_memorized"]) == 2, "slow candidates, each searched"
    return corpus, rows


def scan(corpus: Path, tiny_dir, out: Path, **env) -> subprocess.Popen:
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
        *SLOW,
    ]
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **env}
    )


def signal_mid_search(proc: subprocess.Popen, out: Path, signum: int) -> str:
    """Send `signum` once a search is seen running (its unit's progress names a live search, written at
    one of its GCG steps); the scan's stderr once it ended."""
    deadline = time.monotonic() + 300
    progress = out / "progress" / "search-00000.json"
    while not (progress.exists() and json.loads(progress.read_text() or "{}").get("live")):
        assert proc.poll() is None and time.monotonic() < deadline, "no search ever ran"
        time.sleep(0.05)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    return err


def unit_stats(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((out / "search" / "stats").glob("*.json"))]


def test_sigterm_mid_search_exits_75_and_the_relaunch_gives_the_uninterrupted_table(
    uninterrupted, tiny_dir, tmp_path
):
    corpus, want = uninterrupted
    out = tmp_path / "run"
    proc = scan(corpus, tiny_dir, out)
    err = signal_mid_search(proc, out, signal.SIGTERM)
    assert proc.returncode == 75, err[-3000:]
    assert (
        "SIGTERM received" in err and "relaunch the same command to go on" in err and "Traceback" not in err
    )
    assert not (out / "lock").exists() and not list((out / "progress").glob("*.json"))
    assert not list((out / "done").glob("*")), "no results shard is written from an unfinished search"
    (first,) = unit_stats(out)  # the unit running committed (a search it had not started: a cut of 0 steps)
    cut = first.get("cut", {})
    assert all(c["steps"] == 0 for c in cut.values()), (
        "within the grace the running search reached its verdict"
    )
    again = cli("scan", str(corpus), "--model", str(tiny_dir), "--out", str(out), *SLOW)
    assert again.returncode == 0, again.stderr[-3000:]
    assert comparable(out) == want


def test_sigusr1_past_the_grace_cuts_the_search_resumably_and_the_relaunch_finishes_it(
    uninterrupted, tiny_dir, tmp_path
):
    corpus, want = uninterrupted
    out = tmp_path / "run"
    proc = scan(corpus, tiny_dir, out, ACR_STOP_GRACE_S="0")
    err = signal_mid_search(proc, out, signal.SIGUSR1)
    assert proc.returncode == 75 and "SIGUSR1 received" in err, err[-3000:]
    (first,) = unit_stats(out)
    cut = first["cut"]
    # cut where it stood: it had run forwards (maybe no GCG step of its current length yet) and says where
    assert any(c["forwards"] and c.get("resume") for c in cut.values()), f"the running search was cut: {cut}"
    again = cli("scan", str(corpus), "--model", str(tiny_dir), "--out", str(out), *SLOW)
    assert again.returncode == 0, again.stderr[-3000:]
    got = comparable(out)
    assert [(r["span_id"], r["status"]) for r in got] == [(r["span_id"], r["status"]) for r in want]
    assert not any("cut" in s for s in unit_stats(out))


def test_failed_rows_exit_5_with_their_counts_and_the_relaunch_that_retries_them_exits_0(
    uninterrupted, tiny_dir, tmp_path, monkeypatch
):
    import scanner.search.miniprompt as miniprompt

    corpus, want = uninterrupted
    out = tmp_path / "run"
    real = miniprompt.effective_cap  # the first call inside every span's search
    monkeypatch.setattr(
        miniprompt, "effective_cap", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("boom"))
    )
    failed = cli("scan", str(corpus), "--model", str(tiny_dir), "--out", str(out), *SLOW, "--steps", "1")
    assert failed.returncode == 5, failed.stderr[-3000:]
    searched = sum(r["status"] in ("memorized", "not_memorized") for r in want)
    assert f"{searched} span(s) failed (search {searched};" in failed.stderr
    assert "relaunch the same command to retry them" in failed.stderr
    rows = pq.read_table(out / "results").to_pylist()
    assert sum(r["status"] == "failed" and "boom" in r["reason"] for r in rows) == searched
    monkeypatch.setattr(miniprompt, "effective_cap", real)
    again = cli("scan", str(corpus), "--model", str(tiny_dir), "--out", str(out), *SLOW, "--steps", "1")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "failed" not in {r["status"] for r in pq.read_table(out / "results").to_pylist()}
