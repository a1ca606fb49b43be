"""One writer per run directory: a lock file naming its holder (host, pid, start time), renewed as a lease.

Two drivers in one run directory would each delete the other's temp files and merge stats of shards
the other is rewriting; the second one could print a wrong summary and exit 0. The lock is a file
created by a hard link from a complete temp file, so it appears atomically and whole (O_EXCL on a
file we then write could leave an empty lock behind a kill).

Whether its holder still runs: on this host, a lock whose holder no longer runs is stale and is taken
over. A pid alone does not name a process: after a kill the pid is free, and a later process (any
`sleep`) may get it. So the lock records its holder's start time and the boot it started in (/proc),
and a live pid that started at another time is another process: the lock is stale. A lock without them
(written on a host without /proc, or by hand) is held only by a live acr-scan. From another host (a
relaunched Slurm job on another node, KubeRay's new head pod) the process cannot be checked, so the
lock is a lease: its holder touches the file (its mtime) every quarter of `lease_s`, which the lock
states (ACR_LOCK_LEASE_S, LEASE_S by default), from a thread that runs while units run; a lock of
another host not renewed for its lease_s is stale. A taker that finds one still fresh waits for it to
be renewed (a live scan: refused) or to run out (taken over), at most lease_s. A lock of another host
without lease_s (written by hand) is never stale there: nothing says when its holder would renew it.
Clocks: the file's mtime is compared with this host's clock, so hosts' clocks must agree to well within
a lease (NTP does).

Taking over is atomic: the stale lock is moved aside by a rename (of two takers, one moves it) and
checked to be the very file judged stale (same holder, same mtime); a file that is not (renewed
meanwhile, or a third process's new lock) is put back. A holder whose lock is gone or names another
(it stalled past its lease and was taken over) asks its scan to stop (scanner/stop.py), and on release
removes only its own lock. The scan driver (run/driver.py) is the one taker, so it is not re-entrant: a
second taker in the same process is refused like any other.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from scanner import stop
from scanner.errors import InputError
from scanner.storage import records

log = logging.getLogger(__name__)

LOCK_FILE = "lock"
LEASE_ENV = "ACR_LOCK_LEASE_S"
LEASE_S = 60.0  # a relaunch on another host waits at most this for a killed scan's lock


def lease_s() -> float:
    """The lease this process's locks state (ACR_LOCK_LEASE_S, seconds > 0)."""
    value = os.environ.get(LEASE_ENV)
    if value is None:
        return LEASE_S
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    if not 0 < seconds < float("inf"):
        raise InputError(
            f"{LEASE_ENV}={value!r} is not a number of seconds > 0; unset it for {LEASE_S:g} s, or "
            "set e.g. 120 for a run directory on a slow shared file system"
        )
    return seconds


def identity(pid: int) -> dict:
    """What tells process `pid` from a later one given the same pid: its start time (clock ticks after
    boot, field 22 of /proc/PID/stat) and the boot's id, with its command line; {} without /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
        boot = Path("/proc/sys/kernel/random/boot_id").read_text(encoding="utf-8").strip()
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        started = int(
            stat.rsplit(")", 1)[-1].split()[19]
        )  # after "(comm)", which may hold spaces: field 3 on
    except (OSError, IndexError, ValueError):
        return {}
    return {"started": started, "boot": boot, "command": [a.decode("utf-8", "replace") for a in argv if a]}


def holder_of(pid: int) -> dict:
    """The lock's content for process `pid` of this host."""
    return {
        "host": socket.gethostname(),
        "pid": pid,
        "since": datetime.now(UTC).isoformat(),
        **identity(pid),
        "lease_s": lease_s(),
    }


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


def _look(path: Path) -> tuple[dict, int] | None:
    """(holder, mtime in ns: its last renewal) of the lock at `path`; None without one."""
    try:
        stamp = path.stat().st_mtime_ns
    except FileNotFoundError:
        return None
    holder = _read(path)
    return None if holder is None else (holder, stamp)


def _age(stamp: int) -> float:
    return time.time() - stamp / 1e9


def _elsewhere(holder: dict) -> bool:
    return "damaged" not in holder and holder.get("host") != socket.gethostname()


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


def _is_stale(holder: dict, stamp: int) -> bool:
    if "damaged" in holder:
        return True
    if _elsewhere(holder):  # its process cannot be checked from here: its lease can
        return holder.get("lease_s") is not None and _age(stamp) > holder["lease_s"]
    pid = holder.get("pid")
    return not _alive(pid) or not _same_process(holder, pid)


def _gone(holder: dict, stamp: int) -> str:
    """Why a stale lock's holder is gone, for the warning and for `status`."""
    pid = holder.get("pid")
    if "damaged" in holder:
        return f"the lock file names no process: {holder['damaged']}"
    if _elsewhere(holder):
        return (
            f"host {holder.get('host')} has not renewed it for {_age(stamp):.0f} s, past its lease of "
            f"{holder['lease_s']:g} s (that scan was killed, or its node or pod lost)"
        )
    if not _alive(pid):
        return f"pid {pid} no longer runs"
    command = " ".join(identity(pid).get("command", []))[:200]
    return f"pid {pid} is now another process ({command or 'unknown'}), not the scan that took the lock"


def scan_process(run_dir: str | Path) -> dict:
    """Whether a scan holds the run directory now (for `status`): running True (a live holder on this
    host, or one of another host that renews its lease), False (no lock: the scan ended or was stopped;
    or its holder is gone: killed), None (held from another host by a lock without a lease, written by
    hand, which cannot be checked from here); with the lock's holder, its last renewal's age, and the
    reason."""
    seen = _look(Path(run_dir) / LOCK_FILE)
    if seen is None:
        return {"running": False, "lock": None, "why": "no scan holds the run directory's lock"}
    holder, stamp = seen
    lock = {k: holder.get(k) for k in ("host", "pid", "since", "lease_s")}
    about = {"lock": {**lock, "renewed_s_ago": round(_age(stamp), 1)}}
    if _elsewhere(holder) and holder.get("lease_s") is None:
        return {
            "running": None,
            **about,
            "why": f"the lock is held from host {holder.get('host')} without a "
            "lease (written by hand?), which cannot be checked from here",
        }
    if _is_stale(holder, stamp):
        return {
            "running": False,
            **about,
            "why": f"the lock's holder is gone: {_gone(holder, stamp)} (killed?)",
        }
    where = f" on host {holder.get('host')}, which renews its lease" if _elsewhere(holder) else ""
    return {"running": True, **about, "why": f"acr-scan pid {holder.get('pid')}{where} holds the lock"}


def _private(kind: str) -> str:
    """This process's own file beside the lock: hosts sharing the folder may run equal pids; hidden and
    .tmp, so readers and the run directory's checks pass it by (storage/rundir.py foreign_entries)."""
    return f".{LOCK_FILE}.{socket.gethostname()}.{os.getpid()}.{kind}"


def _try_create(path: Path, mine: dict) -> bool:
    tmp = path.with_name(_private("tmp"))
    tmp.write_text(json.dumps(mine), encoding="utf-8")
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    finally:
        tmp.unlink()


def _refuse(run_dir: Path, holder: dict) -> InputError:
    lease = holder.get("lease_s")
    fix = (
        f"a lock its holder stops renewing is taken over {lease:g} s later"
        if lease and _elsewhere(holder)
        else f"if that process no longer runs, delete {run_dir / LOCK_FILE}"
    )
    return InputError(
        f"run directory '{run_dir}' is in use by acr-scan pid {holder.get('pid')} on host "
        f"{holder.get('host')} since {holder.get('since')}; wait for that scan to finish (follow it with "
        f"`acr-scan status {run_dir}`), then relaunch ({fix})"
    )


def _outlived(path: Path, holder: dict, stamp: int) -> bool:
    """Wait while another host's lease runs: True once it ran out unrenewed (or the lock went), False
    when renewed or replaced (a live holder). Waits at most its lease."""
    lease = holder["lease_s"]
    log.warning(
        "run directory %s: the lock of pid %s on host %s was renewed %.0f s ago; waiting up to %.0f s "
        "for it to be renewed (a live scan: refused) or to run out (taken over)",
        path.parent,
        holder.get("pid"),
        holder.get("host"),
        _age(stamp),
        max(0.0, lease - _age(stamp)),
    )
    while _age(stamp) <= lease:
        time.sleep(min(1.0, lease / 8))
        now = _look(path)
        if now != (holder, stamp):
            return now is None
    return True


def _break(path: Path, holder: dict, stamp: int) -> None:
    """Remove the stale lock (`holder`, renewed at `stamp`) and no other (module docstring)."""
    aside = path.with_name(_private("stale.tmp"))
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return  # another taker moved it first
    if _look(aside) != (holder, stamp):  # renewed meanwhile, or a newer lock: put back
        with contextlib.suppress(FileExistsError):
            os.link(aside, path)
    aside.unlink()


def _acquire(run_dir: Path) -> dict:
    """Take the lock; returns what it holds (this process's holder record)."""
    path, mine = run_dir / LOCK_FILE, _holder()
    for _ in range(3):  # a stale lock removed by us may be taken by a third process meanwhile
        if _try_create(path, mine):
            return mine
        seen = _look(path)
        if seen is None:
            continue
        holder, stamp = seen
        if _elsewhere(holder) and holder.get("lease_s") and not _is_stale(holder, stamp):
            if not _outlived(path, holder, stamp):
                raise _refuse(run_dir, (_look(path) or seen)[0])
            seen = _look(path)
            if seen is None:
                continue
            holder, stamp = seen
        if not _is_stale(holder, stamp):
            raise _refuse(run_dir, holder)
        log.warning(
            "run directory %s: taking over the lock of pid %s on %s: %s",
            run_dir,
            holder.get("pid"),
            holder.get("host"),
            _gone(holder, stamp),
        )
        _break(path, holder, stamp)
    raise _refuse(run_dir, _read(path) or {})


class _Lease(threading.Thread):
    """Renews the held lock every quarter of its lease while the scan runs; a lock found gone or naming
    another holder stops the scan (scanner/stop.py): another driver has taken the run directory over."""

    def __init__(self, path: Path, mine: dict) -> None:
        super().__init__(name="run-lock-lease", daemon=True)
        self.path, self.mine, self.ended = path, mine, threading.Event()

    def run(self) -> None:
        while not self.ended.wait(self.mine["lease_s"] / 4):
            if not self.renew():
                return

    def renew(self) -> bool:
        """Touch the lock; False once it is lost."""
        now = _read(self.path)
        if now is not None and "damaged" in now:  # a shared file system's passing fault: try again
            log.warning(
                "run directory %s: could not read the lock to renew it (%s)", self.path.parent, now["damaged"]
            )
            return True
        if now != self.mine:
            log.error(
                "run directory %s: this scan's lock is %s; another driver took the run directory over "
                "(this one stalled past its lease of %g s?): stopping",
                self.path.parent,
                f"held by pid {now.get('pid')} on host {now.get('host')}" if now else "gone",
                self.mine["lease_s"],
            )
            stop.request("the run directory's lock was lost")
            return False
        try:
            os.utime(self.path)
        except OSError as err:  # a shared file system's passing fault: the next renewal tries again
            log.warning(
                "run directory %s: could not renew the lock (%s); trying again", self.path.parent, err
            )
        return True

    def end(self) -> None:
        self.ended.set()
        self.join()


@contextlib.contextmanager
def run_lock(run_dir: str | Path) -> Iterator[None]:
    """Hold the run directory's lock (creating the folder) for the duration of the block, renewing it."""
    folder = Path(run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    mine = _acquire(folder)
    lease = _Lease(folder / LOCK_FILE, mine)
    lease.start()
    try:
        yield
    finally:
        lease.end()
        if _read(folder / LOCK_FILE) == mine:  # not a lock another driver took over with
            with contextlib.suppress(FileNotFoundError):
                (folder / LOCK_FILE).unlink()
