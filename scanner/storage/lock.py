"""One writer per run directory: a lock file naming its holder (host, pid, start time).

Two drivers in one run directory would each delete the other's temp files and merge stats of shards
the other is rewriting; the second one could print a wrong summary and exit 0. The lock is a file
created by a hard link from a complete temp file, so it appears atomically and whole (O_EXCL on a
file we then write could leave an empty lock behind a kill). A lock whose holder ran on this host and
no longer runs is stale and is taken over; one from another host cannot be checked from here, so the
message names it and the fix. The scan driver (run/driver.py) is its one taker, so it is not
re-entrant: a second taker in the same process is refused like any other.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from scanner.errors import InputError

log = logging.getLogger(__name__)

LOCK_FILE = "lock"


def _holder() -> dict:
    return {"host": socket.gethostname(), "pid": os.getpid(), "since": datetime.now(UTC).isoformat()}


def _read(path: Path) -> dict | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}  # unreadable: treated as a stale lock below
    return value if isinstance(value, dict) else {}


def _alive(pid) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, owned by another user
    return True


def _is_stale(holder: dict) -> bool:
    if not holder:
        return True
    return holder.get("host") == socket.gethostname() and not _alive(holder.get("pid"))


def _try_create(path: Path) -> bool:
    tmp = path.with_name(f".{LOCK_FILE}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(_holder()), encoding="utf-8")
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    finally:
        tmp.unlink()


def _refuse(run_dir: Path, holder: dict) -> InputError:
    return InputError(
        f"run directory '{run_dir}' is in use by acr-scan pid {holder.get('pid')} on host "
        f"{holder.get('host')} since {holder.get('since')}; wait for that scan to finish (follow it with "
        f"`acr-scan status {run_dir}`), or, if that process no longer runs, delete {run_dir / LOCK_FILE} "
        "and relaunch")


def _acquire(run_dir: Path) -> None:
    path = run_dir / LOCK_FILE
    for _ in range(3):  # a stale lock removed by us may be taken by a third process meanwhile
        if _try_create(path):
            return
        holder = _read(path)
        if holder is None:
            continue
        if not _is_stale(holder):
            raise _refuse(run_dir, holder)
        log.warning("run directory %s: taking over the lock of pid %s on %s, which no longer runs",
                    run_dir, holder.get("pid"), holder.get("host"))
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    raise _refuse(run_dir, _read(path) or {})


@contextlib.contextmanager
def run_lock(run_dir: str | Path) -> Iterator[None]:
    """Hold the run directory's lock (creating the folder) for the duration of the block."""
    folder = Path(run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    _acquire(folder)
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            (folder / LOCK_FILE).unlink()
