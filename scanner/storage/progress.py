"""A running unit's progress in the run directory: progress/<unit>.json, written atomically by the worker
that runs the unit (at most every few seconds, run/heartbeat.py) and removed when the unit commits or
fails. `acr-scan status` and `--watch` read them (`running`), so they see inside a unit that runs for
minutes or hours, on this machine or on a Ray actor writing to the shared run directory.

A file whose unit is committed (its done marker exists: a worker killed between the commit and the
removal) is no running unit; a file whose worker died stays, its heartbeat's age saying so, until a
relaunch removes it before any unit starts (clear_stale).

given_up.json lists the tasks the Ray driver gave up because their heartbeat stopped (executors/ray.py:
the actor killed, the task re-queued), over the run directory's life; `status` counts them."""

from __future__ import annotations

import re
import time
from pathlib import Path

from scanner.storage.atomic import atomic_write_json, remove_file
from scanner.storage.integrity import read_json_object
from scanner.storage.records import GIVEN_UP, read_record
from scanner.storage.store import Store

PROGRESS_DIR = "progress"
GIVEN_UP_FILE = "given_up.json"
UNIT_NAME = re.compile(r"(certify|search|audit|tighten)-(\d{5})")  # run/tasks.py UNIT_KINDS
# Live fields a reader passes on (numbers, or a span id below); anything else in a file is dropped.
LIVE_NUMBERS = (
    "candidate",
    "length",
    "trial",
    "step",
    "steps",
    "right",
    "target_tokens",
    "prompt_tokens",
    "total_steps",
    "elapsed_s",
)
UNIT_NUMBERS = ("candidates_done", "candidates_total", "started", "heartbeat", "pid")
SPAN_ID = re.compile(r"[\w.:-]{1,80}")
STAGES = ("calibration",)  # a unit's work after its searches (search/progress.py SearchObserver.stage)


def progress_path(run_path: str | Path, unit: str) -> Path:
    return Path(run_path) / PROGRESS_DIR / f"{unit}.json"


def write_progress(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, record)


def clear_progress(path: Path) -> None:
    remove_file(path)


def clear_stale(run_path: str | Path) -> list[str]:
    """Remove every progress file: called under the run's lock before any unit starts, when each one is
    left by a worker that stopped (a killed run), so status shows no unit running that is not. Returns
    the names removed."""
    folder = Path(run_path) / PROGRESS_DIR
    stale = sorted(folder.glob("*.json")) if folder.is_dir() else []
    for path in stale:
        remove_file(path)
    return [path.name for path in stale]


def _number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _live(entry) -> dict | None:
    """One live search of a progress file, its fields checked (None when it is not an object)."""
    if not isinstance(entry, dict):
        return None
    out = {k: entry[k] for k in LIVE_NUMBERS if _number(entry.get(k))}
    span = entry.get("span_id")
    out["span_id"] = span if isinstance(span, str) and SPAN_ID.fullmatch(span) else None
    return out


def _unit(path: Path, run_path: Path, now: float) -> dict | None:
    """A running unit's record as read from `path`, checked; None when it is unreadable, not a unit's
    or its unit is committed."""
    name = UNIT_NAME.fullmatch(path.stem)
    record = read_json_object(path) if name else None
    if record is None or not _number(record.get("heartbeat")):
        return None
    if Store(run_path, name.group(1)).done_path(int(name.group(2))).exists():
        return None
    out = {"unit": path.stem, **{k: record[k] for k in UNIT_NUMBERS if _number(record.get(k))}}
    live = record.get("live") if isinstance(record.get("live"), list) else []
    out["live"] = [entry for entry in map(_live, live) if entry is not None]
    stage = record.get("stage")
    if (
        isinstance(stage, dict)
        and stage.get("name") in STAGES
        and _number(stage.get("done"))
        and _number(stage.get("total"))
    ):
        out["stage"] = {k: stage[k] for k in ("name", "done", "total")}
    out["heartbeat_age_s"] = round(max(0.0, now - record["heartbeat"]), 3)
    return out


def running(run_path: str | Path, now: float | None = None) -> list[dict]:
    """Every running unit's progress (`status`'s `running`), by unit name: candidates done of the unit's
    total, its live searches (candidate, span id, prompt length, step, steps, tokens right) and the age
    of its heartbeat in seconds."""
    now = time.time() if now is None else now
    folder = Path(run_path) / PROGRESS_DIR
    if not folder.is_dir():
        return []
    units = (_unit(path, Path(run_path), now) for path in sorted(folder.glob("*.json")))
    return [unit for unit in units if unit is not None]


def record_given_up(run_path: str | Path, event: dict) -> None:
    """Add one given-up task to given_up.json (the driver is its only writer, so read-modify-write holds)."""
    path = Path(run_path) / GIVEN_UP_FILE
    events = (read_record(path, GIVEN_UP) or {"events": []})["events"]
    atomic_write_json(path, {"events": [*events, event]})


def given_up(run_path: str | Path) -> dict:
    """`status`'s count of tasks given up as hung, and the last one (task, pid, seconds silent, when)."""
    events = (read_record(Path(run_path) / GIVEN_UP_FILE, GIVEN_UP, quiet=True) or {"events": []})["events"]
    return {"count": len(events), "last": events[-1] if events else None}
