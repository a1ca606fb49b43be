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
    command = [sys.executable, "-m", "scanner", "scan", str(corpus), "--model", str(tiny_dir), "--out", str(out),
               *CLI_SEARCH, "--executor", "ray", "--num-actors", "2"]
    # Its own session: killing the group takes the driver's local Ray down with it, as a lost node would.
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline and not any((out / "screen" / "done").glob("0*")):
        time.sleep(0.2)
    assert proc.poll() is None, "the scan finished before it could be killed; the test lost its point"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    done_before = len(list((out / "screen" / "done").iterdir()))  # killed in phase 1
    assert 1 <= done_before < 7
    final = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert final.returncode == 0, final.stderr
    got = pq.read_table(out / "results")
    assert len(set(got.column("span_id").to_pylist())) == got.num_rows
    assert comparable(got) == comparable(want)
