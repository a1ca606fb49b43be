"""`acr-scan status RUN --watch`: a live view of a scan that a person can follow, phase by phase.

It reads only the run directory (scanner/storage/status.py: plans, done markers, the parts' stats), never
talks to the driver, so it follows a scan running anywhere that writes to a shared run directory: a Ray
job on a cluster, another terminal, another machine on NFS. Each frame names the phase (starting,
screen, certify, search, tighten, write, passages, complete), one line per phase with its counts, and the
current phase's throughput and ETA, and a line per running unit (storage/progress.py: its candidates done,
each live search's span, prompt length, GCG step and tokens right, the age of its heartbeat).
A run no scan works on (its lock gone, or its holder gone: killed) is shown once, as stopped, with
no throughput nor ETA, and the watch ends.
"""

from __future__ import annotations

import time
from datetime import datetime

from scanner.errors import require
from scanner.storage.progress import running
from scanner.storage.rundir import PLAN_FILE, RunDir
from scanner.storage.status import progress

STEPS = ("screen", "certify", "search", "audit", "tighten", "write", "passages")


def snapshot(run: RunDir, workers: int = 1, now: float | None = None) -> dict:
    """Everything one frame shows, as plain values."""
    now = time.time() if now is None else now
    snap = {**progress(run, workers), "time": now, "workers": workers, "running": running(run.path, now)}
    if (run.path / PLAN_FILE).exists():
        snap["results"] = run.status(workers)  # phase 3's counts by status
    return snap


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return (
        f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"
    )


def _of(done, total) -> str:
    return f"{done}/{'?' if total is None else total}"


def _screen(s: dict) -> str:
    return (
        f"{_of(s['shards_done'], s['shards_total'])} shards, {_of(s['docs_done'], s['docs_total'])} documents, "
        f"{s['tokens']} tokens, {s['spans']} spans, {s['candidates']} candidates"
    )


def _certify(s: dict) -> str:
    failed = f", {s['failed']} failed (a relaunch checks them again)" if s["failed"] else ""
    return f"{_of(s['units_done'], s['units_total'])} units, {s['settled']} spans settled by certificates{failed}"


def _search(s: dict) -> str:
    budget = s["budget"]
    spent = (
        f"{budget['spent']:g} {budget['kind']} (no budget)"
        if budget["total"] is None
        else f"{budget['spent']:g} of {budget['total']:g} {budget['kind']}"
    )
    cost = "" if s["s_per_candidate"] is None else f", {s['s_per_candidate']:.2f} s per candidate"
    stop = s.get("stopped")  # its numbers only: status validated them as integers
    stopped = (
        ""
        if not stop
        else (
            f"; stopped by the auto budget, {stop['memorized']} memorized of the last "
            f"{stop['window']} decided"
        )
    )
    cut = (
        (
            f", {s['candidates_cut']} cut by the budget ({s['searches_cut']} searches stopped mid-way: a relaunch "
            "with a larger --search-budget goes on from where they stood)"
        )
        if s.get("candidates_cut")
        else ""
    )
    return (
        f"{_of(s['candidates_done'], s['candidates_total'])} candidates decided, {s['memorized']} "
        f"memorized, budget spent {spent}{cost}{cut}{stopped}"
    )


def _audit(s: dict) -> str:
    if s["off"]:
        return "none (--audit-sample 0)"
    if s["units_total"] is None:
        return f"drawn once every candidate the budget allows has its verdict (--audit-sample {s['sample']})"
    if not s["candidates_total"]:
        return f"none drawn: {s['why'] or 'nothing left to draw from'}"
    return (
        f"{_of(s['candidates_done'], s['candidates_total'])} drawn spans searched, {s['memorized']} memorized"
    )


def _tighten(s: dict) -> str:
    if s["units_total"] is None:
        return "planned once every candidate has its verdict"
    cost = "" if s["s_per_candidate"] is None else f", {s['s_per_candidate']:.2f} s per candidate"
    return (
        f"{_of(s['candidates_done'], s['candidates_total'])} decided prompts shrunk, budget spent "
        f"{s['budget']['spent']:g} {s['budget']['kind']} in all{cost}"
    )


def _write(s: dict) -> str:
    return f"{_of(s['shards_done'], s['shards_total'])} shards written"


def _passages(s: dict) -> str:
    return "built" if s["built"] else "not built yet"


LINES = {
    "screen": _screen,
    "certify": _certify,
    "search": _search,
    "audit": _audit,
    "tighten": _tighten,
    "write": _write,
    "passages": _passages,
}


def _rate(snap: dict) -> str:
    phase = snap["phase"]
    s = snap.get(phase, {})
    if phase == "screen" and s["docs_per_s"]:
        return f"{s['tokens_per_s']:.0f} tokens/s, {s['docs_per_s']:.2f} documents/s ({s['rate']})"
    if phase == "certify" and s["units_per_s"]:
        return f"{s['units_per_s']:.2f} units/s ({s['rate']})"
    if phase in ("search", "audit", "tighten") and s["candidates_per_s"]:
        return f"{s['candidates_per_s']:.2f} candidates/s ({s['rate']})"
    if phase == "write" and s["shards_per_s"]:
        return f"{s['shards_per_s']:.2f} shards/s (wall clock)"
    if phase in ("complete", "passages"):
        return "finished" if phase == "complete" else "not measured (passages.parquet is one task)"
    return f"unknown until the first parts of {ENDS[phase]} are done"


ENDS = {
    "screen": "the screen",
    "certify": "the certificates",
    "search": "the verdicts",
    "audit": "the recall audit",
    "tighten": "the tightening",
    "write": "the write",
    "passages": "the passages",
}


def _eta(snap: dict) -> str:
    phase = snap["phase"]
    if phase == "complete":
        return "finished"
    if snap["eta_s"] is None:
        return "unknown (one task builds passages.parquet)" if phase == "passages" else "unknown yet"
    ends = "the budget" if phase in ("search", "tighten") and snap[phase]["ends"] == "budget" else ENDS[phase]
    audit = snap.get("audit") or {}
    then = (
        ""
        if phase != "search" or audit.get("off") or audit.get("eta_s") is None
        else f", then about {_duration(audit['eta_s'])} for the recall audit (--audit-sample {audit['sample']})"
    )
    return f"{_duration(snap['eta_s'])} to the end of {ends}{then}"


def stopped(snap: dict) -> bool:
    """No scan works on the run and it is not complete; a folder that no scan locked yet and that has no
    plan is waiting for its scan to start, not stopped."""
    process = snap["scan_process"]
    started = snap["phase"] != "starting" or process["lock"] is not None
    return process["running"] is False and snap["phase"] != "complete" and started


def render(snap: dict, run_dir: str) -> str:
    clock = datetime.fromtimestamp(snap["time"]).strftime("%H:%M:%S")
    halted = stopped(snap)
    head = (
        f"run {run_dir}  phase: {snap['phase']}{', stopped: no scan is running' if halted else ''}  ({clock})"
    )
    relaunch = (
        f"none: no scan is running ({snap['scan_process']['why']}); relaunch the scan command to "
        "resume it (finished work is kept)"
    )
    if "screen" not in snap:
        return head + "\n  " + (relaunch if halted else "waiting for the scan to save its shard plan")
    reached = STEPS.index(snap["phase"]) if snap["phase"] in STEPS else len(STEPS)
    rows = [(step, LINES[step](snap[step]) if i <= reached else "waiting") for i, step in enumerate(STEPS)]
    if reached >= STEPS.index("write"):  # the results table's counts, once there is one
        counts = (
            ", ".join(f"{k} {v}" for k, v in sorted(snap["results"]["status_counts"].items())) or "none yet"
        )
        rows.append(("results", f"{snap['results']['rows']} spans ({counts})"))
    damaged = snap.get("results", {}).get("damaged_shards", {})  # not counted above: a relaunch redoes them
    rows += [("damaged", f"shard {shard}: {why}") for shard, why in damaged.items()]
    last = (
        "none yet" if snap["last_commit"] is None else f"{_duration(snap['time'] - snap['last_commit'])} ago"
    )
    rows += [
        ("throughput", "none: no scan is running" if halted else _rate(snap)),
        ("ETA", relaunch if halted else _eta(snap)),
        ("last commit", last),
    ]
    rows += [("given up", given_up_line(snap["given_up"]))] if snap.get("given_up", {}).get("count") else []
    rows += [("running", running_line(unit)) for unit in snap.get("running", [])]
    return "\n".join([head, *(f"  {name:<12}{value}" for name, value in rows)])


def given_up_line(given: dict) -> str:
    """Tasks the Ray driver gave up as hung (their actor killed, the task re-queued), and the last one."""
    last = given["last"] or {}
    return (
        f"{given['count']} task{'s' if given['count'] != 1 else ''} hung (actor killed, task re-queued); last "
        f"{last.get('task', '?')}, no heartbeat for {_duration(last.get('silent_s', 0))}"
    )


def search_line(live: dict) -> str:
    """One live search of a running unit: its candidate, span, prompt length, GCG step and tokens right."""
    where = f"candidate {live.get('candidate', '?')} (span {live.get('span_id') or '?'})"
    if live.get("length") is None:
        return f"{where}: starting"
    step = f"step {live.get('step', 0)}/{live.get('steps', 0)}" if live.get("steps") else "no GCG steps"
    return (
        f"{where}: length {live['length']}, {step}, right {live.get('right', 0)}/{live.get('target_tokens', '?')}, "
        f"{_duration(live.get('elapsed_s', 0))}"
    )


def running_line(unit: dict) -> str:
    """A running unit (storage/progress.py running): candidates done, its live searches, its heartbeat."""
    stage = unit.get("stage")  # its fields checked by storage/progress.py
    after = (
        f"{stage['name']} of {stage['done']:g}/{stage['total']:g} memorized spans"
        if stage
        else "between candidates"
    )
    live = "; ".join(map(search_line, unit["live"])) or after
    return (
        f"{unit['unit']}: {_of(unit.get('candidates_done', 0), unit.get('candidates_total'))} candidates done; "
        f"{live}; heartbeat {_duration(unit['heartbeat_age_s'])} ago"
    )


def watch(run_dir: str, *, interval: float, iterations: int | None, workers: int, show) -> int:
    """Show a frame every `interval` seconds until the run is complete or stopped (no scan runs) or
    `iterations` frames were shown; `show(text)` draws one frame. Returns the number of frames. Ctrl-C
    is the caller's."""
    require(interval > 0, f"--interval {interval} must be > 0 seconds")
    require(iterations is None or iterations >= 1, f"--iterations {iterations} must be >= 1")
    require(workers >= 1, f"workers {workers} must be >= 1")
    run = RunDir(run_dir)
    require(
        not run.path.exists() or run.path.is_dir(),
        f"'{run_dir}' is a file, not a run directory; pass the --out folder of a scan",
    )
    frames = 0
    while True:
        snap = snapshot(run, workers) if run.path.is_dir() else None  # not made yet: its scan may be starting
        show(
            render(snap, run_dir) if snap else f"{run_dir}: waiting for a scan to make it (its --out folder)"
        )
        frames += 1
        if (snap and (snap["phase"] == "complete" or stopped(snap))) or (
            iterations is not None and frames >= iterations
        ):
            return frames
        time.sleep(interval)
