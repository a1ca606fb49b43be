"""A scan as a Ray job on a two-node local cluster, under node and head failures.

    python bench/cluster/ray_cluster.py [--workdir DIR] [--scenario node|head|both] [--timeout 1500]

What users run, on one machine: `ray start --head` and `ray start --address` as separate process trees
(each node with its own --temp-dir, loopback address 127.0.0.N and free ports, the run directory on
the shared file system), the scan submitted with `ray job submit` (`python -m scanner scan ... --executor ray
--ray-address auto`, this checkout on PYTHONPATH through the job's runtime env). The head has no CPUs,
so the job's driver runs there and the shard actors on the worker node, as on a GPU cluster with a
CPU head.

- node: when a shard is done, every process of the worker node (raylet, agents, actors) is killed with
  SIGKILL and a new worker node started; the job must finish (or a resubmission must), with a table
  equal to a local run's.
- head: when a shard is done, every process of the head (GCS, dashboard, raylet, job supervisor and
  driver) is killed, then the worker node; a new cluster is started and the same job resubmitted; it
  must resume (done shards kept) and end with the equal table.

Every process started is killed on exit, failure included, by its id: the process trees of the nodes
started here, then any process whose command line names this run's Ray folders. `ray stop` is not used:
it stops every Ray process on the machine, other users' included.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pyarrow.parquet as pq

from scanner.schema import WALL_CLOCK

ROOT = Path(__file__).resolve().parents[2]
RAY = str(Path(sys.executable).with_name("ray"))
# tests/test_ray.py's search: 12-token spans, a CPU-sized GCG, one torch thread (equal tables need it).
SEARCH = ["--span-tokens", "12", "--stride", "2", "--context-tokens", "16", "--min-match-rate", "0.95",
          "--steps", "40", "--candidates", "64", "--top-k", "64", "--restarts", "0", "--docs-per-shard", "1",
          "--device", "cpu", "--threads", "1"]
# Loopback only, one address per node. Not 127.0.0.1: Ray replaces "127.0.0.1" and "localhost", in
# --node-ip-address and --address alike, by the host's outward address.
HEAD_IP = "127.0.0.2"
STARTUP_S = 240  # a node joins in ~40 s on the loaded 2-core machine
# The clusters' own token, in this process and every node and job (RAY_AUTH_TOKEN outranks the user's
# ~/.ray/auth_token, which a local ray.init() creates and a `ray start` then picks up).
AUTH = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")


class Deadline:
    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()

    def wait(self, ready, what: str, poll: float = 0.5, within: float | None = None):
        """Poll `ready()` until it returns something true; TimeoutError naming `what` past the deadline
        (or `within` seconds, if sooner)."""
        end = min(self.end, time.monotonic() + within) if within else self.end
        while time.monotonic() < end:
            value = ready()
            if value:
                return value
            time.sleep(poll)
        raise TimeoutError(f"timed out waiting for {what}")


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def comparable(table) -> list[dict]:
    """Rows by span_id without the wall-clock columns (as tests/test_ray.py compares)."""
    rows = [{k: v for k, v in r.items() if k not in WALL_CLOCK} for r in table.to_pylist()]
    return sorted(rows, key=lambda r: r["span_id"])


def done_shards(run: Path) -> int:
    return len(list((run / "done").glob("[0-9]*")))  # not the hidden .tmp files of a commit


@dataclass
class Node:
    name: str
    proc: subprocess.Popen

    def processes(self) -> list[psutil.Process]:
        try:
            root = psutil.Process(self.proc.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def kill(self) -> int:
        """SIGKILL the whole tree at once (listed first: children of a killed parent are re-parented)."""
        procs = self.processes()
        for p in procs:
            try:
                p.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(procs, timeout=10)
        self.proc.wait(timeout=10)
        return len(procs)


@dataclass
class Cluster:
    """Ray nodes started here with `ray start --block`, each its own process tree and temp dir."""

    root: Path  # short: Ray's socket paths must stay under 107 bytes
    keep: Path  # where the nodes' logs are copied on close
    nodes: list[Node] = field(default_factory=list)
    gcs_port: int = 0
    dashboard_port: int = 0

    @property
    def dashboard(self) -> str:
        return f"http://{HEAD_IP}:{self.dashboard_port}"

    def _ports(self) -> list[str]:
        node, objects, agent, agent_grpc, env_agent, metrics = free_ports(6)
        return ["--node-ip-address", HEAD_IP if not self.nodes else f"127.0.0.{2 + len(self.nodes)}",
                "--node-manager-port", str(node),
                "--object-manager-port", str(objects), "--dashboard-agent-listen-port", str(agent),
                "--dashboard-agent-grpc-port", str(agent_grpc), "--runtime-env-agent-port", str(env_agent),
                "--metrics-export-port", str(metrics), "--object-store-memory", str(200 * 2**20)]

    def _start(self, name: str, args: list[str]) -> Node:
        temp = self.root / name
        temp.mkdir(parents=True)
        env = {k: v for k, v in os.environ.items()
               if k in AUTH or not k.startswith("RAY_") and k != "PYTHONPATH"}
        with open(self.root / f"{name}.log", "w") as log:  # the node's own output
            proc = subprocess.Popen([RAY, "start", "--block", "--temp-dir", str(temp), "--disable-usage-stats",
                                     *self._ports(), *args], stdout=log, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)
        node = Node(name, proc)
        self.nodes.append(node)
        return node

    def start_head(self) -> Node:
        self.gcs_port, self.dashboard_port, client = free_ports(3)
        return self._start(f"head{len(self.nodes)}", [
            "--head", "--port", str(self.gcs_port), "--num-cpus", "0", "--include-dashboard", "true",
            "--dashboard-host", HEAD_IP, "--dashboard-port", str(self.dashboard_port),
            "--ray-client-server-port", str(client)])

    def start_worker(self, cpus: int) -> Node:
        return self._start(f"worker{len(self.nodes)}", [
            "--address", f"{HEAD_IP}:{self.gcs_port}", "--num-cpus", str(cpus)])

    def alive_nodes(self) -> int:
        from ray.exceptions import AuthenticationError
        from ray.util.state import list_nodes

        try:
            nodes = list_nodes(address=self.dashboard, filters=[("state", "=", "ALIVE")], timeout=10)
        except AuthenticationError:
            raise
        except Exception:  # the dashboard is not up yet
            return 0
        return len(nodes)

    def close(self) -> int:
        """Kill every node started here, then any straggler naming this run's folders; returns the count."""
        killed = sum(node.kill() for node in self.nodes if node.proc.poll() is None)
        mine = str(self.root)
        for p in psutil.process_iter(["cmdline"]):
            if any(mine in arg for arg in p.info["cmdline"] or []):
                try:
                    p.kill()
                    killed += 1
                except psutil.NoSuchProcess:
                    pass
        for log in self.root.glob("*.log"):  # the nodes' own output, kept beside the figures
            shutil.copy(log, self.keep / f"{self.root.name}-{log.name}")
        shutil.rmtree(self.root, ignore_errors=True)
        return killed


class Job:
    """One `ray job submit --no-wait`, followed through the job API."""

    def __init__(self, cluster: Cluster, job_id: str, entrypoint: list[str]) -> None:
        from ray.job_submission import JobSubmissionClient

        runtime_env = json.dumps({"env_vars": {"PYTHONPATH": str(ROOT)}})
        subprocess.run([RAY, "job", "submit", "--address", cluster.dashboard, "--submission-id", job_id,
                        "--no-wait", "--runtime-env-json", runtime_env, "--", *entrypoint],
                       check=True, capture_output=True, text=True, timeout=120)
        self.id, self.client, self.started = job_id, JobSubmissionClient(cluster.dashboard), time.monotonic()

    def status(self) -> str:
        return str(self.client.get_job_status(self.id)).split(".")[-1]

    def finished(self) -> str | None:
        status = self.status()
        return status if status in ("SUCCEEDED", "FAILED", "STOPPED") else None

    def logs(self) -> str:
        return self.client.get_job_logs(self.id)


def scan_command(corpus: Path, model: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "scanner", "-v", "scan", str(corpus), "--model", str(model), "--out", str(out),
            *SEARCH, *extra]


def ray_scan(corpus: Path, model: Path, out: Path) -> list[str]:
    return scan_command(corpus, model, out, "--executor", "ray", "--ray-address", "auto", "--num-actors", "2")


def log_figures(logs: str) -> dict:
    """What the driver's log says: actors that died, shard retries, shards pending at its start."""
    pending = re.search(r"(\d+) of (\d+) shards pending", logs)
    return {"actor_deaths": len(re.findall(r"Ray actor \d+ died", logs)),
            "retries": len(re.findall(r"; retry \d+ of \d+", logs)),
            "pending_at_start": int(pending.group(1)) if pending else None,
            "shards_total": int(pending.group(2)) if pending else None}


def first_death_at(logs: str) -> float | None:
    """Epoch seconds of the driver's first "Ray actor N died" line (logging's asctime, local time)."""
    found = re.search(r"^(\S+ \S+),(\d+) WARNING \S+: Ray actor \d+ died", logs, re.M)
    if not found:
        return None
    return time.mktime(time.strptime(found.group(1), "%Y-%m-%d %H:%M:%S")) + int(found.group(2)) / 1000


def start_cluster(work: Path, deadline: Deadline, cpus: int) -> tuple[Cluster, float]:
    start = time.monotonic()
    cluster = Cluster(Path(tempfile.mkdtemp(prefix="rc-", dir="/tmp")), work)
    try:
        cluster.start_head()
        deadline.wait(lambda: cluster.alive_nodes() >= 1, "the head node", poll=1, within=STARTUP_S)
        cluster.start_worker(cpus)
        deadline.wait(lambda: cluster.alive_nodes() >= 2, "the worker node", poll=1, within=STARTUP_S)
    except BaseException:
        cluster.close()
        raise
    return cluster, time.monotonic() - start


def wait_for_shards(job: Job, out: Path, deadline: Deadline, count: int = 1) -> int:
    """Wait until `count` shards are done while the job still runs; the shards done then."""
    deadline.wait(lambda: done_shards(out) >= count or job.finished(), f"{count} shard(s) done", poll=0.2)
    if job.finished():
        raise RuntimeError(f"job {job.id} ended ({job.status()}) before the fault; the run lost its point:\n"
                           + job.logs()[-3000:])
    return done_shards(out)


def finish(job: Job, deadline: Deadline) -> tuple[str, float]:
    status = deadline.wait(job.finished, f"job {job.id}", poll=1)
    return status, time.monotonic() - job.started


def node_scenario(work: Path, command: list[str], out: Path, deadline: Deadline, cpus: int) -> dict:
    cluster, startup = start_cluster(work, deadline, cpus)
    try:
        job = Job(cluster, "scan-node-kill", command)
        done_at_kill = wait_for_shards(job, out, deadline)
        worker = cluster.nodes[-1]
        killed_at, killed = time.time(), worker.kill()
        cluster.start_worker(cpus)
        status, seconds = finish(job, deadline)
        logs = job.logs()
        figures = {"cluster_start_s": round(startup, 1), "shards_done_at_kill": done_at_kill,
                   "worker_processes_killed": killed, "job_status": status, "job_s": round(seconds, 1),
                   **log_figures(logs)}
        died = first_death_at(logs)
        figures["death_seen_after_s"] = round(died - killed_at, 1) if died else None
        if status != "SUCCEEDED":  # the job did not survive the node: a resubmission must finish it
            print(logs[-3000:], file=sys.stderr)
            again = Job(cluster, "scan-node-kill-2", command)
            figures["resubmitted_status"], figures["resubmitted_s"] = finish(again, deadline)
            figures["resubmitted_pending_at_start"] = log_figures(again.logs())["pending_at_start"]
        (work / "node-job.log").write_text(logs)
        return figures
    finally:
        print(f"node scenario: {cluster.close()} cluster processes killed at the end", file=sys.stderr)


def driver_alive(out: Path) -> bool:
    return any(str(out) in " ".join(p.info["cmdline"] or []) for p in psutil.process_iter(["cmdline"]))


def head_scenario(work: Path, command: list[str], out: Path, deadline: Deadline, cpus: int) -> dict:
    first, startup = start_cluster(work, deadline, cpus)
    try:
        job = Job(first, "scan-head-kill", command)
        wait_for_shards(job, out, deadline)
        head, worker = first.nodes
        killed = head.kill()
        driver_survived = driver_alive(out)
        killed += worker.kill()  # without its head the cluster is gone; its actors may have committed
        done_at_kill = done_shards(out)
    finally:
        first.close()
    second, restart = start_cluster(work, deadline, cpus)
    try:
        again = Job(second, "scan-head-kill-relaunch", command)
        status, seconds = finish(again, deadline)
        logs = again.logs()
        (work / "head-job.log").write_text(logs)
        return {"cluster_start_s": round(startup, 1), "processes_killed": killed,
                "driver_survived_head_kill": driver_survived, "shards_done_at_kill": done_at_kill,
                "new_cluster_start_s": round(restart, 1), "relaunch_status": status,
                "relaunch_s": round(seconds, 1), **log_figures(logs)}
    finally:
        second.close()


def reference(work: Path, corpus: Path, model: Path) -> tuple[list[dict], float | None]:
    """The local run's table and its seconds (None: a finished one in `work` is reused)."""
    out = work / "local"
    if (out / "results").is_dir() and done_shards(out) == pq.read_metadata(corpus).num_rows:
        return comparable(pq.read_table(out / "results")), None
    start = time.monotonic()
    subprocess.run(scan_command(corpus, model, out), check=True, capture_output=True, timeout=900,
                   env={**os.environ, "PYTHONPATH": str(ROOT)})
    return comparable(pq.read_table(out / "results")), time.monotonic() - start


def run_scenario(name: str, work: Path, corpus: Path, model: Path, want: list[dict], deadline: Deadline,
                 cpus: int) -> dict:
    out = work / f"{name}-run"
    scenario = node_scenario if name == "node" else head_scenario
    figures = scenario(work, ray_scan(corpus, model, out), out, deadline, cpus)
    got = pq.read_table(out / "results")
    figures["rows"] = got.num_rows
    figures["duplicate_rows"] = got.num_rows - len(set(got.column("span_id").to_pylist()))
    figures["table_equals_local"] = comparable(got) == want
    return figures


def stop(*_) -> None:
    """SIGTERM: exit through the clusters' cleanup, which a second signal must not interrupt."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(143)


def main() -> None:
    from scanner.cli.demo import demo_corpus
    from scanner.studies.tiny import build_tiny

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", default=None, help="Kept; the tiny model is cached there.")
    parser.add_argument("--scenario", choices=["node", "head", "both"], default="both")
    parser.add_argument("--timeout", type=float, default=1500, help="Seconds for everything after the model.")
    parser.add_argument("--worker-cpus", type=int, default=2)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, stop)
    os.environ.update(dict(zip(AUTH, ("token", secrets.token_hex(32)), strict=True)))  # before Ray loads it
    work = Path(args.workdir or tempfile.mkdtemp(prefix="acr-ray-cluster-"))
    model = build_tiny(work / "tiny")
    corpus = demo_corpus(work / "corpus.parquet")
    deadline = Deadline(args.timeout)
    for old in ("node-run", "head-run"):
        shutil.rmtree(work / old, ignore_errors=True)
    want, local_s = reference(work, corpus, model)
    figures = {"local_scan_s": local_s and round(local_s, 1), "local_rows": len(want)}
    for name in (["node", "head"] if args.scenario == "both" else [args.scenario]):
        figures[name] = run_scenario(name, work, corpus, model, want, deadline, args.worker_cpus)
        print(json.dumps({name: figures[name]}), flush=True)
    (work / "figures.json").write_text(json.dumps(figures, indent=1))
    print(json.dumps(figures, indent=1))
    ok = all(figures[n]["table_equals_local"] and not figures[n]["duplicate_rows"] for n in figures if n in
             ("node", "head"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
