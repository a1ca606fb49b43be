"""cluster/slurm.sbatch for real: a one-node Slurm cluster on this machine (cluster/slurm-local.sh),
the script submitted as a user on CPU nodes would (Ray started inside the job, the tiny model, a
small corpus), then the same job requeued by `scontrol requeue` mid-scan: the relaunch resumes in the
same run directory and its table equals the uninterrupted job's.

Slow (about five minutes on 2 cores) and run only where Slurm is installed; it installs nothing.
`bash cluster/check-slurm.sh` runs it (docs/cluster.md, "Checking the Slurm script")."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from scanner.cli.demo import demo_corpus
from scanner.schema import WALL_CLOCK

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
SLURM_LOCAL = ROOT / "cluster" / "slurm-local.sh"
SBATCH = ROOT / "cluster" / "slurm.sbatch"
INSTALL = "apt-get install --no-install-recommends slurmctld slurmd slurm-client munge"
MISSING = [
    tool for tool in ("slurmctld", "slurmd", "sbatch", "scontrol", "munged") if shutil.which(tool) is None
]
if MISSING:
    pytest.skip(
        f"Slurm is not installed ({', '.join(MISSING)} not found); install it: {INSTALL}",
        allow_module_level=True,
    )

# tests/test_ray.py's search: a strict screen, two searched candidates, one torch thread per actor
# (equal tables need it), no recall audit (its count follows measured seconds). One document per
# shard, so that a requeue can land between shards.
SCAN_ARGS = (
    "--span-tokens 12 --stride 2 --context-tokens 16 --min-match-rate 0.8 --steps 10 --candidates 64 "
    "--top-k 64 --restarts 0 --docs-per-shard 1 --max-candidates 2 --unit-size 1 --device cpu "
    "--threads 1 --audit-sample 0 --num-actors 2 --cpus-per-actor 1"
)
# What a user on CPU nodes overrides of the script's #SBATCH lines (which ask for GPU nodes).
SUBMIT = ["--nodes=1", "--gpus-per-node=0", "--cpus-per-task=2"]
JOB_LIMIT_S = 600  # a broken slurmd leaves a job pending forever: every wait has a deadline


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def slurm():
    """SLURM_CONF of the one-node cluster; stopped afterwards if this test started it."""
    conf = subprocess.run(["bash", str(SLURM_LOCAL), "conf"], capture_output=True, text=True, check=True)
    env = {**os.environ, "SLURM_CONF": conf.stdout.split("=", 1)[1].strip()}
    was_up = subprocess.run(["scontrol", "ping"], env=env, capture_output=True, text=True).returncode == 0
    started = subprocess.run(["bash", str(SLURM_LOCAL), "start"], capture_output=True, text=True, timeout=120)
    assert started.returncode == 0, started.stderr
    yield env["SLURM_CONF"]
    if not was_up:
        subprocess.run(["bash", str(SLURM_LOCAL), "stop"], timeout=120)


@pytest.fixture(scope="module")
def job_env(slurm, tiny_dir, tmp_path_factory):
    """The environment a user exports before `sbatch`: this virtualenv and checkout, corpus and model."""
    root = tmp_path_factory.mktemp("slurm")
    corpus = demo_corpus(root / "corpus.parquet")
    return root, {
        **os.environ,
        "SLURM_CONF": slurm,
        "ACR_ENV": sys.prefix,
        "PYTHONPATH": str(ROOT),
        "CORPUS": str(corpus),
        "MODEL": str(tiny_dir),
        "SCAN_ARGS": SCAN_ARGS,
        "RAY_PORT": str(free_port()),
        "ACR_AUDIT_SAMPLE": "0",
    }


def submit(root: Path, env: dict, run_dir: Path) -> str:
    out = subprocess.run(
        ["sbatch", "--parsable", *SUBMIT, f"--output={root}/%x-%j.out", str(SBATCH)],
        env={**env, "RUN_DIR": str(run_dir)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().split(";")[0]


def job_fields(job: str, env: dict) -> dict[str, str]:
    shown = subprocess.run(
        ["scontrol", "show", "job", job], env=env, capture_output=True, text=True, timeout=60
    )
    return dict(re.findall(r"(\w+)=(\S*)", shown.stdout))


def wait_for(job: str, env: dict, until, what: str) -> dict[str, str]:
    deadline = time.monotonic() + JOB_LIMIT_S
    while time.monotonic() < deadline:
        fields = job_fields(job, env)
        if until(fields):
            return fields
        time.sleep(0.5)
    subprocess.run(["scancel", job], env=env)
    pytest.fail(f"job {job} not {what} after {JOB_LIMIT_S} s: {job_fields(job, env)}")


def held_after(requeued: float, fields: dict[str, str]) -> float | None:
    """Seconds from the requeue (time.time()) to the job's EligibleTime: how long Slurm held it back."""
    from datetime import datetime

    try:  # Slurm's times are the machine's local time, as datetime reads them
        return round(datetime.fromisoformat(fields["EligibleTime"]).timestamp() - requeued, 1)
    except (KeyError, ValueError):
        return None


FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL"}


def comparable(run: Path) -> list[dict]:
    """Rows by span_id without the wall-clock columns, which differ between any two runs."""
    rows = [
        {k: v for k, v in r.items() if k not in WALL_CLOCK}
        for r in pq.read_table(run / "results").to_pylist()
    ]
    return sorted(rows, key=lambda r: r["span_id"])


def log_of(root: Path, job: str) -> str:
    return (root / f"acr-scan-{job}.out").read_text(errors="replace")


@pytest.fixture(scope="module")
def uninterrupted(job_env):
    root, env = job_env
    start = time.monotonic()
    job = submit(root, env, root / "ref")
    fields = wait_for(job, env, lambda f: f.get("JobState") in FINISHED, "finished")
    seconds = time.monotonic() - start
    assert (fields["JobState"], fields["ExitCode"]) == ("COMPLETED", "0:0"), log_of(root, job)[-3000:]
    return root / "ref", job, seconds


def test_the_batch_script_starts_ray_and_scans_the_corpus(uninterrupted, job_env):
    run, job, _ = uninterrupted
    root, _ = job_env
    rows = comparable(run)
    assert len({r["span_id"] for r in rows}) == len(rows) > 0
    assert any(r["memorized"] for r in rows), "the planted canaries must be found"
    log = log_of(root, job)
    assert re.search(r"Ray: 2 actors \(0 GPU", log), "the scan did not run on the job's Ray"
    assert '"shards_done": 7' in log  # `acr-scan status` after the scan


def test_a_requeue_mid_scan_resumes_and_gives_the_uninterrupted_table(uninterrupted, job_env):
    reference, _, reference_s = uninterrupted
    root, env = job_env
    run = root / "requeued"
    start = time.monotonic()
    job = submit(root, env, run)
    # Mid-scan: once a screen shard is committed, while results are still missing.
    fields = wait_for(
        job,
        env,
        lambda f: any((run / "screen").glob("part-*.parquet")) or f.get("JobState") in FINISHED,
        "screening",
    )
    assert fields["JobState"] == "RUNNING", log_of(root, job)[-3000:]
    assert len(list((run / "done").glob("*"))) < 7, (
        "the scan finished before the requeue; the test lost its point"
    )
    requeued_at, requeued = time.monotonic() - start, time.time()
    subprocess.run(["scontrol", "requeue", job], env=env, check=True, timeout=60)
    fields = wait_for(
        job,
        env,
        lambda f: f.get("JobState") in FINISHED and f.get("Restarts") == "1",
        "finished after its requeue",
    )
    seconds = time.monotonic() - start
    assert (fields["JobState"], fields["ExitCode"]) == ("COMPLETED", "0:0"), log_of(root, job)[-3000:]
    assert comparable(run) == comparable(reference)
    # Both attempts in one log (--open-mode=append); the relaunch kept the committed screen shards.
    to_screen = [int(n) for n in re.findall(r"(\d+) of 7 shards still to screen", log_of(root, job))]
    assert len(to_screen) == 2 and to_screen[0] == 7 and to_screen[1] < 7, to_screen
    figures = {
        "uninterrupted_s": round(reference_s, 1),
        "requeued_at_s": round(requeued_at, 1),
        "requeued_job_s": round(seconds, 1),
        "held_after_requeue_s": held_after(requeued, fields),
        "rows": len(comparable(run)),
        "shards_to_screen": to_screen,
    }
    print(json.dumps(figures))
    if os.environ.get("ACR_SLURM_FIGURES"):
        Path(os.environ["ACR_SLURM_FIGURES"]).write_text(json.dumps(figures, indent=1) + "\n")
