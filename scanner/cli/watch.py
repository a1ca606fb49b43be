"""`acr-scan status RUN --watch`: a live view of a scan that a person can follow.

It reads only the run directory (plan, done markers, per-shard stats: what RunDir.status reads), never
talks to the driver, so it follows a scan running anywhere that writes to a shared run directory: a Ray
job on a cluster, another terminal, another machine on NFS. Throughput and ETA come from the wall-clock
times of the last shard commits (the done markers' mtimes), so they count every worker at once; until
two shards are done they fall back to RunDir.status's per-worker estimate.
"""

from __future__ import annotations

import contextlib
import json
import time
from datetime import datetime

from scanner.errors import require
from scanner.run.phases import status as phase_status
from scanner.storage.rundir import PLAN_FILE, RunDir

RECENT = 8  # shard commits the wall-clock rate is measured over: recent enough to follow a resumed run


def _commits(run: RunDir, shards: list[int]) -> list[tuple[float, int]]:
    """(mtime of the done marker, shard), oldest first; a marker removed meanwhile (rewrite) is left out."""
    times = []
    for shard in shards:
        with contextlib.suppress(FileNotFoundError):
            times.append((run.done_path(shard).stat().st_mtime, shard))
    return sorted(times)


def _spans(run: RunDir, shard: int) -> int:
    with contextlib.suppress(FileNotFoundError, ValueError):
        return int(json.loads(run.stats_path(shard).read_text()).get("spans", 0))
    return 0


def _wall_rate(run: RunDir, commits: list[tuple[float, int]], docs: dict[int, int]) -> dict | None:
    """Spans and documents per wall-clock second over the last RECENT commits; None below two."""
    window = commits[-(RECENT + 1):]
    seconds = window[-1][0] - window[0][0] if len(window) >= 2 else 0.0
    if seconds <= 0:
        return None
    shards = [shard for _, shard in window[1:]]
    return {"spans_per_s": sum(_spans(run, s) for s in shards) / seconds,
            "docs_per_s": sum(docs[s] for s in shards) / seconds, "shards": len(shards)}


def snapshot(run: RunDir, workers: int = 1, now: float | None = None) -> dict:
    """Everything one frame shows, as plain values."""
    now = time.time() if now is None else now
    if not (run.path / PLAN_FILE).exists():
        return {"phase": "starting (no shard plan yet)", "time": now}
    status = run.status(workers)
    plan = run.load_plan()
    docs = {s.shard: s.num_docs for s in plan}
    commits = _commits(run, run.done_shards())
    done_docs = sum(docs.get(shard, 0) for _, shard in commits)
    complete = status["shards_done"] == status["shards_total"]
    rate = _wall_rate(run, commits, docs)
    eta = 0.0 if complete else (plan.num_docs - done_docs) / rate["docs_per_s"] if rate else status["eta_s"]
    phases = phase_status(run)
    return {**status, "phase": "complete" if complete else _phase(phases), "phases": phases, "time": now,
            "docs_done": done_docs,
            "docs_total": plan.num_docs, "memorized": status["status_counts"].get("memorized", 0),
            "wall_rate": rate, "eta_s": eta, "workers": workers,
            "last_commit_s": now - commits[-1][0] if commits else None}


def _phase(phases: dict) -> str:
    if phases["screened_shards"] < phases["shards_total"]:
        return "scanning (1 screen)"
    units = phases["search_units"]
    return "scanning (2 search)" if units["total"] is None or units["done"] < units["total"] else "scanning (3 write)"


def _search_line(phases: dict) -> str:
    units, budget = phases["search_units"], phases["budget"]
    total = "?" if units["total"] is None else units["total"]
    spent = f"{budget['spent']:g} {budget['kind']}" + ("" if budget["total"] is None else f" / {budget['total']:g}")
    return (f"{phases['candidates']} candidates, {phases['certified']} settled by certificates, units "
            f"{units['done']}/{total} done, budget spent {spent}, not searched {phases['not_searched']}")


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown until a shard is done"
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"


def _throughput(snap: dict) -> str:
    rate = snap["wall_rate"]
    if rate:
        return (f"{rate['spans_per_s']:.1f} spans/s, {rate['docs_per_s']:.2f} documents/s (wall clock, "
                f"last {rate['shards']} shard commits)")
    if snap["spans_per_s"] is None:
        return "unknown until a shard is done"
    return f"{snap['spans_per_s']:.1f} spans/s per worker (work time of finished shards; --workers {snap['workers']})"


def render(snap: dict, run_dir: str) -> str:
    clock = datetime.fromtimestamp(snap["time"]).strftime("%H:%M:%S")
    head = f"run {run_dir}  phase: {snap['phase']}  ({clock})"
    if "shards_total" not in snap:
        return head
    counts = ", ".join(f"{k} {v}" for k, v in sorted(snap["status_counts"].items())) or "none yet"
    last = "none yet" if snap["last_commit_s"] is None else f"{_duration(snap['last_commit_s'])} ago"
    phases = snap["phases"]
    rows = [("screen", f"{phases['screened_shards']}/{phases['shards_total']} shards screened"),
            ("search", _search_line(phases)),
            ("shards", f"{snap['shards_done']}/{snap['shards_total']} done"),
            ("documents", f"{snap['docs_done']}/{snap['docs_total']} done"),
            ("spans", f"{snap['rows']} done ({counts})"), ("memorized", f"{snap['memorized']} so far"),
            ("throughput", _throughput(snap)),
            ("ETA", "finished" if snap["phase"] == "complete" else _duration(snap["eta_s"])),
            ("last commit", last)]
    return "\n".join([head, *(f"  {name:<12}{value}" for name, value in rows)])


def watch(run_dir: str, *, interval: float, iterations: int | None, workers: int, show) -> int:
    """Show a frame every `interval` seconds until the run is complete or `iterations` frames were
    shown; `show(text)` draws one frame. Returns the number of frames. Ctrl-C is the caller's."""
    require(interval > 0, f"--interval {interval} must be > 0 seconds")
    require(iterations is None or iterations >= 1, f"--iterations {iterations} must be >= 1")
    require(workers >= 1, f"workers {workers} must be >= 1")
    run = RunDir(run_dir)
    require(run.path.is_dir(), f"'{run_dir}' does not exist; pass the --out folder of a scan (it is made "
            "when the scan starts)")
    frames = 0
    while True:
        snap = snapshot(run, workers)
        show(render(snap, run_dir))
        frames += 1
        if snap["phase"] == "complete" or (iterations is not None and frames >= iterations):
            return frames
        time.sleep(interval)
