"""Actors that follow the cluster, on a real multi-node Ray on this machine (ray.cluster_utils.Cluster):
a scan submitted to a cluster with no node for an actor yet waits for one (a log line says so) instead of
failing, and one more actor starts when a node joins mid-scan, so the nodes an autoscaler adds are used.
A file of its own: its cluster is not test_ray's local Ray. Fixtures and helpers: test_ray.py."""

from __future__ import annotations

import logging
import os
import threading
import time

import pyarrow.parquet as pq
import pytest
import test_ray
from test_ray import comparable, config

from scanner.config import ExecutorConfig
from scanner.run.driver import run_scan

ray, ray_tmp, reference = test_ray.ray, test_ray.ray_tmp, test_ray.reference


@pytest.fixture
def cluster(ray_tmp, monkeypatch):
    """A head with no CPU for an actor (the AWS launcher's CPU head, which holds no GPU): the scan's
    actors can only run on the worker nodes a test adds."""
    from ray.cluster_utils import Cluster

    # Cluster writes its address to RAY_TMPDIR/ray/ray_current_cluster (else /tmp/ray, which a fresh
    # machine lacks and another Ray on it would share): a private one for this cluster.
    monkeypatch.setenv("RAY_TMPDIR", ray_tmp)
    os.makedirs(os.path.join(ray_tmp, "ray"), exist_ok=True)

    # No exit hooks: they set a SIGTERM handler, which Python allows only in the main thread, and a test
    # adds a node from another (the fixture shuts the cluster down itself).
    made = Cluster(
        initialize_head=True,
        shutdown_at_exit=False,
        head_node_args={"num_cpus": 0, "temp_dir": ray_tmp, "include_dashboard": False},
    )
    ray.init(address=made.address, configure_logging=False)
    try:
        yield made
    finally:
        ray.shutdown()
        made.shutdown()


@pytest.mark.timeout(240)  # a node that never joins leaves the scan waiting, as it should
def test_a_scan_waits_for_its_first_node_and_grows_onto_a_node_that_joins(
    cluster, reference, tiny_dir, tmp_path, monkeypatch, caplog
):
    corpus, want = reference
    monkeypatch.setattr("scanner.executors.ray.POLL_S", 0.5)  # how often the driver looks at the cluster
    joined = {}

    def nodes_join() -> None:  # as an autoscaler's would, once the scan is waiting for them
        deadline = time.monotonic() + 120
        while "waiting for a node to join" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.1)
        joined["first"] = cluster.add_node(num_cpus=1).node_id
        # The second joins while the scan runs its first actor (about 3 s later, still loading the model
        # on this machine's 2 cores: the whole scan's work is left for both, so both take some).
        joined["second"] = cluster.add_node(num_cpus=1).node_id

    adder = threading.Thread(target=nodes_join, daemon=True)
    adder.start()
    with caplog.at_level(logging.INFO, logger="scanner.executors.ray"):
        stats = run_scan(
            config(corpus, tiny_dir),
            str(tmp_path / "run"),
            executor=ExecutorConfig(kind="ray", address=cluster.address),
        )
    adder.join()
    report = stats["run"]
    said = caplog.text
    assert "0 CPUs, too few for one actor" in said and said.index("Ray: 1 actors") < said.index(
        "Ray: 2 actors: a node joined"
    )
    assert report["actors"] == 2 and report["failed_shards"] == {}, report
    assert set(report["nodes"]) == {joined["first"], joined["second"]}, (report, joined)
    assert comparable(pq.read_table(tmp_path / "run" / "results")) == comparable(want)


@pytest.mark.timeout(180)
def test_the_actors_shrink_when_a_node_leaves_and_no_replacement_waits_for_it(cluster, tmp_path, monkeypatch):
    """A node leaves mid-run (an autoscaler's scale-down, a lost spot instance): its actor's task is rerun
    on the other, and the slot is retired rather than kept waiting for a node that is gone. Stand-in
    actors (test_ray.scripted_actor) on the real cluster: this is the scheduler's bookkeeping."""
    from scanner.executors.ray import actors_fitting

    monkeypatch.setattr("scanner.executors.ray.POLL_S", 0.2)
    leaving = cluster.add_node(num_cpus=1)
    cluster.add_node(num_cpus=1)
    scheduler, made = test_ray.scripted_scheduler(
        tmp_path,
        [],
        shards=16,
        actors=2,
        max_retries=2,
        target=lambda: actors_fitting(ray.cluster_resources(), 0, 1),
    )
    done = []

    def finished(stats: dict) -> None:
        done.append(stats)
        if len(done) == 3:
            cluster.remove_node(leaving)

    try:
        scheduler.run(finished=finished)
        deadline = time.monotonic() + 30
        while len(scheduler.slots) > 1 and time.monotonic() < deadline:  # Ray may see the node gone late
            scheduler.look()
            time.sleep(0.2)
    finally:
        for actor in made:
            ray.kill(actor)
    assert sorted(s["shard"] for s in done) == list(range(16)) and not scheduler.failed
    assert scheduler.restarts >= 1, "the leaving node's actor died in its task and was seen to"
    assert len(scheduler.slots) == 1 and not scheduler.busy, (scheduler.slots, scheduler.busy)
