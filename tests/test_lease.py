"""The run directory's lock as a lease: its holder renews it while the scan runs; a lock of
another host not renewed for its lease is taken over with a warning naming the old holder; two live
drivers still exclude each other. Two "hosts" on this machine are two UTS namespaces (`unshare --uts`,
each with its own hostname): the pids are shared, the hostnames differ, as for a relaunched Slurm job on
another node or KubeRay's new head pod. Fixtures and helpers of the scan: test_faults.py."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import test_faults
from clirun import cli
from test_faults import SCAN, comparable, write_corpus

from scanner import stop
from scanner.errors import InputError
from scanner.storage.lock import run_lock, scan_process

reference = test_faults.reference  # pytest finds a module's fixtures among its attributes

HOLD = """
import sys, time
from scanner.errors import InputError
from scanner.storage.lock import run_lock
try:
    with run_lock(sys.argv[1]):
        print("held", flush=True)
        time.sleep(float(sys.argv[2]))
except InputError as err:
    print(err, flush=True)
    sys.exit(2)
"""


def on_host(host: str, command: list[str], lease: float, **popen) -> subprocess.Popen:
    """`command` in a UTS namespace of its own named `host`, its locks stating `lease` seconds."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.fail("this test needs root and unshare (util-linux) for a UTS namespace per host")
    env = {**os.environ, "ACR_LOCK_LEASE_S": str(lease), "PYTHONPATH": str(Path(__file__).parent.parent)}
    script = 'hostname "$0" && exec "$@"'
    return subprocess.Popen(
        ["unshare", "--uts", "sh", "-c", script, host, *command], env=env, text=True, **popen
    )


def hold(host: str, run: Path, seconds: float, lease: float) -> subprocess.Popen:
    return on_host(
        host,
        [sys.executable, "-c", HOLD, str(run), str(seconds)],
        lease,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def wait_for(path: Path, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)


def test_a_held_lock_is_renewed_while_the_block_runs_and_released(tmp_path, monkeypatch):
    monkeypatch.setenv("ACR_LOCK_LEASE_S", "0.4")  # renewed every 0.1 s
    lock = tmp_path / "run" / "lock"
    with run_lock(tmp_path / "run"):
        assert json.loads(lock.read_text())["lease_s"] == 0.4
        os.utime(lock, (1, 1))  # as if last renewed in 1970
        time.sleep(0.5)
        assert time.time() - lock.stat().st_mtime < 0.5, "the holder renews the lock while it holds it"
    assert not lock.exists()


def test_a_lock_taken_over_meanwhile_stops_the_scan_and_is_left_to_its_new_holder(tmp_path, monkeypatch):
    monkeypatch.setenv("ACR_LOCK_LEASE_S", "0.4")
    lock = tmp_path / "run" / "lock"
    other = {"host": "node-b", "pid": 4242, "since": "now", "lease_s": 60.0}
    try:
        with run_lock(tmp_path / "run"):
            lock.write_text(json.dumps(other))  # another driver took it over while this one stalled
            time.sleep(0.5)
            assert stop.requested() and "lock was lost" in stop.reason()
    finally:
        stop.reset()
    assert json.loads(lock.read_text()) == other, "the new holder's lock is not removed"


def test_another_hosts_lock_not_renewed_within_its_lease_is_taken_over_naming_its_holder(tmp_path, caplog):
    run = tmp_path / "run"
    run.mkdir()
    (run / "lock").write_text(json.dumps({"host": "node-a", "pid": 4242, "since": "then", "lease_s": 5.0}))
    os.utime(run / "lock", (time.time() - 30, time.time() - 30))
    assert scan_process(run)["running"] is False and "not renewed it for 30 s" in scan_process(run)["why"]
    with caplog.at_level(logging.WARNING, logger="scanner.storage.lock"), run_lock(run):
        assert json.loads((run / "lock").read_text())["host"] == socket.gethostname()
    assert (
        "taking over the lock of pid 4242 on node-a: host node-a has not renewed it for 30 s" in caplog.text
    )
    # one renewed a moment ago is waited for, at most its lease, then taken over unrenewed
    (run / "lock").write_text(json.dumps({"host": "node-a", "pid": 4343, "since": "then", "lease_s": 1.0}))
    start = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="scanner.storage.lock"), run_lock(run):
        waited = time.monotonic() - start
    assert 0.8 < waited < 5 and "waiting up to 1 s" in caplog.text and "pid 4343 on node-a" in caplog.text
    # a lock of another host without lease_s (written by hand) cannot be judged: refused
    (run / "lock").write_text(json.dumps({"host": "node-a", "pid": 4242, "since": "then"}))
    os.utime(run / "lock", (1, 1))
    with pytest.raises(InputError, match="in use by acr-scan pid 4242 on host node-a"), run_lock(run):
        pass


def test_two_live_drivers_on_two_hosts_exclude_each_other_until_one_dies(tmp_path):
    run = tmp_path / "run"
    first = hold("node-a", run, 120, lease=1.0)
    wait_for(run / "lock", first)
    assert first.stdout.readline().strip() == "held"
    held = scan_process(run)
    assert held["running"] is True and "on host node-a, which renews its lease" in held["why"], held
    second = hold("node-b", run, 0, lease=1.0)
    out, err = second.communicate(timeout=60)
    assert second.returncode == 2 and "in use by acr-scan pid" in out and "on host node-a" in out, out + err
    first.kill()  # SIGKILL: nothing releases the lock, nothing renews it
    first.wait()
    third = hold("node-b", run, 0, lease=1.0)
    out, err = third.communicate(timeout=60)
    assert third.returncode == 0 and out.strip() == "held", out + err
    assert f"taking over the lock of pid {first.pid} on node-a: host node-a has not renewed it" in err, err
    assert not (run / "lock").exists(), "released by its new holder"


def test_of_many_takers_of_a_stale_lock_exactly_one_holds_it(tmp_path):
    """The take-over moves the stale file aside and checks it is the one judged stale: a taker never
    removes the lock another taker has just made (unlinking by name did)."""
    run = tmp_path / "run"
    run.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (run / "lock").write_text(json.dumps({"host": socket.gethostname(), "pid": dead.pid, "since": "then"}))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    takers = [
        subprocess.Popen(
            [sys.executable, "-c", HOLD, str(run), "4"],
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(6)
    ]
    said = [t.communicate(timeout=120) for t in takers]
    held = [out for out, _ in said if out.strip() == "held"]
    assert len(held) == 1, said
    assert all(
        t.returncode == 2 and "in use by acr-scan pid" in out
        for t, (out, _) in zip(takers, said, strict=True)
        if out.strip() != "held"
    ), said


def test_a_scan_killed_on_one_host_is_relaunched_on_another_and_ends_in_the_same_table(
    reference, tiny_dir, tmp_path
):
    """The killed scan's lease runs out and the relaunch takes its lock over: it must not exit 2 on the
    old host's lock until someone deletes RUN/lock."""
    _, want, _ = reference
    corpus = write_corpus(tmp_path / "corpus.parquet", salad_docs=3)
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
    first = on_host("node-a", command, 2.0, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    test_faults._started(out, first)
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert json.loads((out / "lock").read_text())["host"] == "node-a", "the killed scan left its lock"
    again = on_host("node-b", command, 2.0, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, err = again.communicate(timeout=600)
    assert again.returncode == 0, err[-3000:]
    assert "taking over the lock of pid" in err and "on node-a: host node-a has not renewed it" in err, err[
        -3000:
    ]
    rows = comparable(out)
    assert [r for r in rows if r["doc_row"] in ("corpus.parquet:0", "corpus.parquet:1")] == want
    assert len({r["doc_row"] for r in rows}) == 5 and not (out / "lock").exists()
    assert cli("status", str(out)).returncode == 0
