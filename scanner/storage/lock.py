"""One writer per run directory: a lock file naming its holder (host, pid, start time).

Two drivers in one run directory would each delete the other's temp files and merge stats of shards
the other is rewriting; the second one could print a wrong summary and exit 0. The lock is a file
created by a hard link from a complete temp file, so it appears atomically and whole (O_EXCL on a
file we then write could leave an empty lock behind a kill). A lock whose holder ran on this host and
no longer runs is stale and is taken over; one from another host cannot be checked from here, so the
message names it and the fix. A pid alone does not name a process: after a kill the pid is free, and a
later process (any `sleep`) may get it. So the lock records its holder's start time and the boot it
started in (/proc), and a live pid that started at another time is another process: the lock is stale.
A lock without them (written by hand, or by an older release) is held only by a live acr-scan. The
scan driver (run/driver.py) is its one taker, so it is not re-entrant: a second taker in the same
process is refused like any other.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import socket
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from scanner.errors import InputError
from scanner.storage import records

log = logging.getLogger(__name__)

LOCK_FILE = "lock"


def identity(pid: int) -> dict:
    """What tells process `pid` from a later one given the same pid: its start time (clock ticks after
    boot, field 22 of /proc/PID/stat) and the boot's id, with its command line; {} without /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
        boot = Path("/proc/sys/kernel/random/boot_id").read_text(encoding="utf-8").strip()
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        started = int(stat.rsplit(")", 1)[-1].split()[19])  # after "(comm)", which may hold spaces: field 3 on
    except (OSError, IndexError, ValueError):
        return {}
    return {"started": started, "boot": boot, "command": [a.decode("utf-8", "replace") for a in argv if a]}


def holder_of(pid: int) -> dict:
    """The lock's content for process `pid` of this host."""
    return {"host": socket.gethostname(), "pid": pid, "since": datetime.now(UTC).isoformat(), **identity(pid)}


def _holder() -> dict:
    return holder_of(os.getpid())


def _read(path: Path) -> dict | None:
    """The lock's holder; None without a lock; {"damaged": why} for a record that names no process
    (unreadable, or a pid such as `true`, which Python takes for 1): stale, so it is taken over."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        return {"damaged": f"it is not readable JSON ({err})"}
    why = records.problem(value, records.LOCK)
    return {"damaged": why} if why else value


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


def _is_acr_scan(command: list[str]) -> bool:
    """`acr-scan ...` or `python -m scanner ...`: the commands that take a run directory's lock."""
    names = [os.path.basename(a) for a in command]
    return "acr-scan" in names or any(a == "-m" and b == "scanner" for a, b in itertools.pairwise(command))


def _same_process(holder: dict, pid: int) -> bool:
    """Whether live `pid` is the process that wrote the lock (module docstring)."""
    now = identity(pid)
    if not now:
        return True  # no /proc here: the live pid is all that can be checked
    if "started" in holder:
        return holder.get("started") == now["started"] and holder.get("boot") == now["boot"]
    return _is_acr_scan(now["command"])


def _is_stale(holder: dict) -> bool:
    if "damaged" in holder:
        return True
    if holder.get("host") != socket.gethostname():
        return False  # another host's processes cannot be checked from here
    pid = holder.get("pid")
    return not _alive(pid) or not _same_process(holder, pid)


def _gone(holder: dict) -> str:
    """Why a stale lock's holder is gone, for the warning and for `status`."""
    pid = holder.get("pid")
    if "damaged" in holder:
        return f"the lock file names no process: {holder['damaged']}"
    if not _alive(pid):
        return f"pid {pid} no longer runs"
    command = " ".join(identity(pid).get("command", []))[:200]
    return f"pid {pid} is now another process ({command or 'unknown'}), not the scan that took the lock"


def scan_process(run_dir: str | Path) -> dict:
    """Whether a scan holds the run directory now (for `status`): running True (a live holder on this
    host), False (no lock: the scan ended or was stopped; or its holder is gone: killed), None (held
    from another host, which cannot be checked from here); with the lock's holder and the reason."""
    holder = _read(Path(run_dir) / LOCK_FILE)
    if holder is None:
        return {"running": False, "lock": None, "why": "no scan holds the run directory's lock"}
    about = {"lock": {k: holder.get(k) for k in ("host", "pid", "since")}}
    if "damaged" not in holder and holder.get("host") != socket.gethostname():
        return {"running": None, **about, "why": f"the lock is held from host {holder.get('host')}, which "
                "cannot be checked from here"}
    if _is_stale(holder):
        return {"running": False, **about, "why": f"the lock's holder is gone: {_gone(holder)} (killed?)"}
    return {"running": True, **about, "why": f"acr-scan pid {holder.get('pid')} holds the lock"}


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
        log.warning("run directory %s: taking over the lock of pid %s on %s: %s", run_dir, holder.get("pid"),
                    holder.get("host"), _gone(holder))
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
