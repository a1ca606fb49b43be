"""SIGTERM to a scan on Ray (a batch system's time limit or preemption): the driver admits no more
units, waits up to the grace for those in flight on the actors to commit, releases the lock and exits
75; the relaunch (here on the local executor, which gives equal tables) ends in the reference table.
Fixtures and helpers: test_ray.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq
import test_ray
from clirun import cli
from test_ray import CLI_SEARCH, comparable

ray_tmp, reference = (
    test_ray.ray_tmp,
    test_ray.reference,
)  # pytest finds a module's fixtures among its attributes


def test_sigterm_on_ray_admits_nothing_more_exits_75_and_the_relaunch_ends_in_the_reference(
    reference, tiny_dir, tmp_path, ray_tmp
):
    corpus, want = reference
    out = tmp_path / "run"
    env = {**os.environ, "RAY_TMPDIR": ray_tmp}
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
        *CLI_SEARCH,
        "--executor",
        "ray",
        "--num-actors",
        "1",
    ]
    proc = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    deadline = time.monotonic() + 300
    while (
        proc.poll() is None and time.monotonic() < deadline and not any((out / "screen" / "done").glob("0*"))
    ):
        time.sleep(0.02)
    assert proc.poll() is None, "the scan finished before the signal; the test lost its point"
    proc.send_signal(signal.SIGTERM)  # the driver alone, as Slurm's or Kubernetes' signal reaches it
    try:
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 75, err[-3000:]
    assert "SIGTERM received" in err and "relaunch the same command to go on" in err, err[-3000:]
    assert not (out / "lock").exists(), "the lock is released"
    screened = len(list((out / "screen" / "done").iterdir()))
    assert 1 <= screened and not list((out / "done").glob("*")), "stopped before the end, with work kept"
    again = cli("scan", str(corpus), "--model", str(tiny_dir), "--out", str(out), *CLI_SEARCH)
    assert again.returncode == 0, again.stderr[-3000:]
    assert comparable(pq.read_table(out / "results")) == comparable(want)
