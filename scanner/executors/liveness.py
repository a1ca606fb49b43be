"""Which tasks in flight went silent: the driver's side of the heartbeat (run/heartbeat.py). A worker
rewrites its task's heartbeat file every few seconds, from a timer, while the task runs; a task whose
file has not changed for `hung_after` seconds is on a process that stopped (SIGSTOP, a wedged driver
call, a frozen node) and is given up by the Ray executor.

Change is timed on the driver's own monotonic clock, never against the time written in the file, so
clocks that differ between nodes cannot make a live task look hung (or a hung one live). A task's clock
starts when it is handed out, so one whose worker never wrote a beat is given up too."""

from __future__ import annotations

import os
import time
from pathlib import Path

from scanner.storage.integrity import read_json_object

POLL_S = 5.0  # the longest wait between two looks at the heartbeats (and at the cluster's nodes)


def signature(path: Path) -> tuple | None:
    """What changes at each rewrite of the heartbeat file (an atomic rename: a new inode and mtime)."""
    try:
        st = os.stat(path)
    except OSError:  # not written yet, or removed: the task ended
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


class Liveness:
    """Heartbeat files of the tasks in flight, keyed by the executor's handle for each (an ObjectRef)."""

    def __init__(self, hung_after: float, beat_path, clock=time.monotonic) -> None:
        self.hung_after, self.beat_path, self.clock = hung_after, beat_path, clock
        self.watched: dict = {}  # key -> [path, last signature, when it last changed]

    @property
    def enabled(self) -> bool:
        return self.hung_after > 0 and self.beat_path is not None

    def started(self, key, task) -> None:
        if self.enabled:
            path = Path(self.beat_path(task))
            self.watched[key] = [path, signature(path), self.clock()]

    def forget(self, key) -> None:
        self.watched.pop(key, None)

    def silent(self) -> list[tuple[object, float]]:
        """(key, seconds since its file last changed) of every task silent for `hung_after` or longer."""
        now, out = self.clock(), []
        for key, seen in self.watched.items():
            now_sig = signature(seen[0])
            if now_sig != seen[1]:
                seen[1], seen[2] = now_sig, now
            elif now - seen[2] >= self.hung_after:
                out.append((key, now - seen[2]))
        return out

    def pid(self, key) -> int | None:
        """The pid the task's worker wrote in its heartbeat file, for the log (None when unknown)."""
        record = read_json_object(self.watched[key][0]) if key in self.watched else None
        pid = (record or {}).get("pid")
        return pid if isinstance(pid, int) else None

    @property
    def poll_s(self) -> float | None:
        """How long the driver may wait for a result before it looks again (None: only results matter)."""
        return min(POLL_S, self.hung_after / 4) if self.enabled else None
