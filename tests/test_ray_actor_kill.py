"""An actor killed with SIGKILL mid-run, on a real local Ray (2 CPUs): nothing lost, nothing duplicated;
with --max-retries 0 the shard is reported failed and a relaunch completes it. An actor stopped with
SIGSTOP mid-unit: its heartbeat stops, the driver gives the unit up, kills the actor and reruns the unit
on a new one, and `status` counts the event. Fixtures and helpers: test_ray.py."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time

import psutil
import pyarrow.parquet as pq
import test_ray
from clirun import cli
from test_ray import comparable, config

from scanner.config import ExecutorConfig
from scanner.run.driver import run_scan
from scanner.storage.integrity import read_json_object
from scanner.storage.progress import UNIT_NAME

# test_ray's fixtures, under their names here: pytest finds a module's fixtures among its attributes
local_ray, ray_tmp, reference = test_ray.local_ray, test_ray.ray_tmp, test_ray.reference


def own_actor_pids() -> set[int]:
    """This test process's own ShardWorker actors: the ray::ShardWorker processes among its descendants
    (its local Ray's raylet starts them). A machine-wide search (pgrep) also finds the actors of the other
    xdist worker, or of anyone on the machine, and a kill test would kill one of those."""
    found = set()
    for proc in psutil.Process().children(recursive=True):
        try:
            title = " ".join(proc.cmdline()) or proc.name()
        except psutil.Error:  # gone, a zombie (a killed actor not yet reaped), or not ours to read
            continue
        if title.startswith("ray::ShardWorker"):  # also "ray::ShardWorker.run_task" while in a task
            found.add(proc.pid)
    return found


def test_an_actor_killed_mid_run_loses_nothing_and_duplicates_nothing(
    local_ray, reference, tiny_dir, tmp_path
):
    corpus, want = reference
    killed = []

    def kill_the_other_actor(stats: dict) -> None:
        busy = own_actor_pids() - {stats["pid"]}
        if not killed and busy:  # the actor that did not just finish is in the middle of a shard
            victim = busy.pop()
            os.kill(victim, signal.SIGKILL)
            killed.append(victim)

    stats = run_scan(
        config(corpus, tiny_dir),
        str(tmp_path / "run"),
        progress=kill_the_other_actor,
        executor=ExecutorConfig(kind="ray", num_actors=2),
    )
    assert killed, "no actor was killed; the test lost its point"
    assert stats["run"]["actor_restarts"] == 1 and stats["run"]["failed_shards"] == {}
    got = pq.read_table(tmp_path / "run" / "results")
    assert len(set(got.column("span_id").to_pylist())) == got.num_rows
    assert comparable(got) == comparable(want)


def test_a_shard_out_of_retries_is_reported_and_a_relaunch_completes_it(
    local_ray, reference, tiny_dir, tmp_path
):
    corpus, want = reference
    killed = []

    def kill_the_reporting_actor(stats: dict) -> None:
        # The actor whose shard just finished: its model is loaded (a death while loading is a setup
        # death, which --max-retries 0 turns into an abort, not a failed shard), and the driver hands it
        # the next shard once this returns, which its death then fails. The other actor may still be
        # loading, or may never report at all: screen shards take about a second, so the first actor
        # ready can screen them all.
        if not killed and stats["pid"] in own_actor_pids():
            killed.append(stats["pid"])
            os.kill(stats["pid"], signal.SIGKILL)

    out = str(tmp_path / "run")
    no_retry = ExecutorConfig(kind="ray", num_actors=2, max_retries=0)
    stats = run_scan(config(corpus, tiny_dir), out, progress=kill_the_reporting_actor, executor=no_retry)
    failed = stats["run"]["failed_shards"]
    assert killed and len(failed) >= 1 and all("ActorDied" in e or "Actor" in e for e in failed.values())
    # Phase 1 screens every other shard; the results wait for the failed one (phases.py)
    assert len(list((tmp_path / "run" / "screen" / "done").iterdir())) == stats["shards_total"] - len(failed)
    again = run_scan(config(corpus, tiny_dir), out, executor=no_retry)
    assert again["run"]["failed_shards"] == {} and again["shards_done"] == again["shards_total"]
    assert comparable(pq.read_table(tmp_path / "run" / "results")) == comparable(want)


def stop_an_actor_in_a_unit(out, stopped: list, seconds: float = 120) -> None:
    """SIGSTOP the first of this test's actors seen running a unit (its progress file names its pid): the
    process stays, alive to the OS and to Ray, but its heartbeat stops, as a wedged worker's does."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for path in (out / "progress").glob("*.json"):
            pid = (read_json_object(path) or {}).get("pid") if UNIT_NAME.fullmatch(path.stem) else None
            if pid in own_actor_pids():
                os.kill(pid, signal.SIGSTOP)
                stopped.append((path.stem, pid))
                return
        time.sleep(0.02)


def gone(pid: int, within: float) -> bool:
    """Whether the process ends (or is a zombie) within `within` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        with contextlib.suppress(psutil.NoSuchProcess):
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                time.sleep(0.2)
                continue
        return True
    return False


def test_an_actor_whose_heartbeat_stops_is_given_up_and_its_unit_rerun(
    local_ray, reference, tiny_dir, tmp_path
):
    corpus, want = reference
    out, stopped = tmp_path / "run", []
    watcher = threading.Thread(target=stop_an_actor_in_a_unit, args=(out, stopped), daemon=True)
    watcher.start()
    try:
        stats = run_scan(
            config(corpus, tiny_dir),
            str(out),
            executor=ExecutorConfig(kind="ray", num_actors=2, hung_after=6),
        )
    finally:
        watcher.join()
        # ray.kill returns before the raylet kills the process (a stopped one about 5 s later, when its
        # graceful exit times out): the scan may end first
        ended = {pid: gone(pid, within=60) for _, pid in stopped}
        for _, pid in stopped:  # should the driver not have killed it, the test leaves no stopped process
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    assert stopped, "no actor was stopped in a unit; the test lost its point"
    ((unit, pid),) = stopped
    assert stats["run"]["given_up"] == 1 and stats["run"]["failed_shards"] == {}, stats["run"]
    assert ended[pid], "the hung actor lives on"
    got = pq.read_table(out / "results")
    assert len(set(got.column("span_id").to_pylist())) == got.num_rows
    assert comparable(got) == comparable(want)
    shown = json.loads(cli("status", str(out)).stdout)["progress"]["given_up"]
    assert shown["count"] == 1 and shown["last"]["task"] == unit and shown["last"]["pid"] == pid, shown
    watched = cli("status", str(out), "--watch", "--iterations", "1").stdout
    assert (
        f"given up    1 task hung (actor killed, task re-queued); last {unit}, no heartbeat for" in watched
    ), watched
