"""The library benchmark's commands: acr-scan ingest, scan, status and report, each the real CLI in a
subprocess, timed, with the peak resident memory of the driver and of every process it started.

Memory: a sampler thread walks the subprocess's process tree every `interval` seconds (psutil) and keeps
each process's largest RSS, grouped as the driver (the acr-scan process), Ray workers (the actors:
processes named `ray::...`) and Ray's own services (raylet, GCS, dashboard agents); when the command ends,
wait4 gives the kernel's peak of the largest process of its tree that was reaped (the driver's own peak
when it is the largest: a sample can miss a short peak, the kernel cannot). CPU seconds (user + system)
are kept per process the same way: unlike wall time, they hardly depend on what else the machine runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "scanner", *args]


def _group(proc: psutil.Process, driver: int) -> str | None:
    if proc.pid == driver:
        return "driver"
    try:
        name = " ".join(proc.cmdline()[:1]) or proc.name()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None
    return "ray_workers" if name.startswith("ray::") else "ray_services"


class Sampler(threading.Thread):
    """Peak RSS per process of a process tree, sampled until stopped."""

    def __init__(self, pid: int, interval: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval, self.peaks, self.groups, self.cpu = pid, interval, {}, {}, {}
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            try:
                root = psutil.Process(self.pid)
                procs = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                return
            for proc in procs:
                try:
                    rss, times = proc.memory_info().rss, proc.cpu_times()
                except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                    continue
                group = _group(proc, self.pid)  # asked each time: a Ray worker names itself after it starts
                if group:
                    self.groups[proc.pid] = group
                    self.peaks[proc.pid] = max(self.peaks.get(proc.pid, 0), rss)
                    self.cpu[proc.pid] = times.user + times.system  # the last sample: up to `interval` short
            self.stopped.wait(self.interval)

    def summary(self) -> dict:
        out = {}
        for group in ("driver", "ray_workers", "ray_services"):
            peaks = [self.peaks[p] for p, g in self.groups.items() if g == group]
            if peaks:
                out[group] = {"processes": len(peaks), "peak_rss_mb_max": round(max(peaks) / 2**20, 1),
                              "peak_rss_mb_sum": round(sum(peaks) / 2**20, 1),
                              "cpu_s": round(sum(self.cpu[p] for p, g in self.groups.items() if g == group), 1)}
        return out


def run(args: list[str], log: Path, env: dict | None = None) -> dict:
    """Run a command to the end, its output in `log`; wall seconds, exit code and peak memory."""
    start = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, cwd=REPO,
                                env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})
        sampler = Sampler(proc.pid)
        sampler.start()
        _, wait_status, usage = os.wait4(proc.pid, 0)
        proc.returncode = code = os.waitstatus_to_exitcode(wait_status)
        sampler.stopped.set()
        sampler.join()
    seconds = time.perf_counter() - start
    if code != 0:
        raise RuntimeError(f"{' '.join(args[2:5])} ... exited {code}; see {log}")
    return {"wall_s": round(seconds, 2), "rss": sampler.summary(),
            "kernel_maxrss_mb": round(usage.ru_maxrss / 1024, 1),
            "kernel_cpu_s": round(usage.ru_utime + usage.ru_stime, 1)}


def ingest(folder: Path, out: Path, logs: Path) -> dict:
    return run(cli("ingest", str(folder), "--out", str(out)), logs / "ingest.log")


def status(run_dir: Path) -> dict:
    done = subprocess.run(cli("status", str(run_dir)), capture_output=True, text=True, cwd=REPO, check=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    return json.loads(done.stdout)


def report(run_dir: Path, out: Path, logs: Path) -> dict:
    timed = run(cli("report", str(run_dir), "--out", str(out)), logs / f"report-{run_dir.name}.log")
    return {**timed, "bytes": out.stat().st_size if out.is_file() else 0}
