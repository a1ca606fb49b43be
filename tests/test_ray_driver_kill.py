"""A driver killed (its whole process group, its local Ray with it) mid-run, then relaunched: the scan
resumes and its table equals the local executor's. Fixtures and helpers: test_ray.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq
import test_ray
from test_ray import CLI_SEARCH, comparable

# test_ray's fixtures, under their names here: pytest finds a module's fixtures among its attributes
ray_tmp, reference = test_ray.ray_tmp, test_ray.reference


def test_killed_driver_then_relaunch_resumes(reference, tiny_dir, tmp_path, ray_tmp):
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
        "2",
    ]
    # Its own session: killing the group takes the driver's local Ray down with it, as a lost node would.
    proc = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    deadline = time.monotonic() + 300
    while (
        proc.poll() is None and time.monotonic() < deadline and not any((out / "screen" / "done").glob("0*"))
    ):
        time.sleep(0.02)
    assert proc.poll() is None, "the scan finished before it could be killed; the test lost its point"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    # Killed once its first screen shard was committed: in the screen, or, where the two actors screened
    # the other six (a second a shard) before the signal landed, in a later phase; never finished.
    markers = {f: f.stat().st_mtime_ns for f in out.glob("*/done/*")} | {
        f: f.stat().st_mtime_ns for f in out.glob("done/*")
    }
    assert 1 <= len(list((out / "screen" / "done").iterdir())) <= 7
    assert len(list((out / "done").glob("*"))) < 7, "every results shard was written: the kill came too late"
    final = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert final.returncode == 0, final.stderr
    got = pq.read_table(out / "results")
    assert len(set(got.column("span_id").to_pylist())) == got.num_rows
    assert comparable(got) == comparable(want)
    # It resumed: what the killed driver had committed was kept, not redone.
    assert {f: f.stat().st_mtime_ns for f in markers} == markers
