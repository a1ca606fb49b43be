"""A running task seen from outside. UnitProgress is the SearchObserver (search/progress.py) a worker
hands its unit's searches. It keeps the unit's progress in the run directory (storage/progress.py:
candidates done, each live search's span, prompt length, step and tokens right, the stage after the
searches (calibration), a heartbeat), written at most every WRITE_EVERY_S seconds, and logs a line per
candidate's start, per length tried with its outcome, and per verdict (run/shard.py), into the unit's
log file in logs/ (run/shard.py task_log).

The heartbeat is a timer (Beat): a daemon thread rewrites the file every WRITE_EVERY_S seconds while the
task runs, whatever stage it is in, so a long calibration or a batch of generations, which call no
observer for minutes, never looks like a hung worker to the Ray driver (executors/ray.py gives up a task
whose file stops changing); only a stopped or dead process stops beating. `task_beat` gives the tasks
without an observer (screen shards, passages) the same heartbeat."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from pathlib import Path

from scanner.search.progress import SearchObserver, SearchProgress
from scanner.storage.progress import clear_progress, progress_path, write_progress

log = logging.getLogger(__name__)

WRITE_EVERY_S = 2.0  # a heartbeat a reader finds fresh, without a file write at every GCG step


class Beat:
    """Calls `beat()` every `every` seconds on a daemon thread from `start()` to `stop()`."""

    def __init__(self, beat, every: float) -> None:
        self.beat, self.every, self._stopped = beat, every, threading.Event()
        self._thread = threading.Thread(target=self._run, name="acr-heartbeat", daemon=True)

    def start(self) -> Beat:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stopped.wait(self.every):
            self.beat()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)  # a write stuck on a shared file system must not hold the task


@contextlib.contextmanager
def task_beat(run_path: str | Path, name: str, every: float = WRITE_EVERY_S):
    """A heartbeat file, progress/<name>.json, for a task without an observer, while the block runs."""
    path, began = progress_path(run_path, name), time.time()

    def beat() -> None:
        with contextlib.suppress(OSError):  # a watcher's view is not worth the task
            write_progress(
                path, {"task": name, "pid": os.getpid(), "started": began, "heartbeat": time.time()}
            )

    beat()
    timer = Beat(beat, every).start()
    try:
        yield
    finally:
        timer.stop()
        with contextlib.suppress(OSError):
            clear_progress(path)


class UnitProgress(SearchObserver):
    """One unit's progress: `spans` are its candidates' span ids in job order."""

    def __init__(
        self, run_path: str | Path, unit: str, spans: list[str], every: float = WRITE_EVERY_S
    ) -> None:
        self.path, self.unit, self.spans, self.every = progress_path(run_path, unit), unit, spans, every
        self.done, self.live, self.warned, self.step = 0, {}, False, None
        self.began, self.written = time.time(), float("-inf")
        self.lock, self.closed = threading.Lock(), False  # the timer's writes and the unit's own alternate
        self._write()  # at once: a unit is visible as running from its start
        self.timer = Beat(self._write, every).start()

    def _span(self, index: int) -> str:
        return self.spans[index] if 0 <= index < len(self.spans) else f"#{index}"

    def started(self, progress: SearchProgress) -> None:
        self.live[progress.index] = progress
        log.info(
            "span %s (candidate %d/%d, %d tokens) starts%s",
            self._span(progress.index),
            progress.index + 1,
            len(self.spans),
            progress.target_tokens,
            f", prompt cap {progress.cap}" if progress.cap else "",
        )
        self._write()  # a search is seen at once (one write a candidate, not a step): a short one too

    def length_started(self, progress: SearchProgress) -> None:
        self._maybe_write()

    def stepped(self, progress: SearchProgress) -> None:
        if time.monotonic() - self.written >= self.every:  # the hot path: one clock read, most steps
            self._write()

    def length_finished(self, progress: SearchProgress) -> None:
        retry = f" (restart {progress.trial})" if progress.trial else ""
        log.info(
            "span %s: length %s%s %s after %d/%d steps, best right %d/%d, %.1f s",
            self._span(progress.index),
            progress.length,
            retry,
            progress.outcome,
            progress.step,
            progress.steps,
            progress.right,
            progress.target_tokens,
            progress.elapsed(),
        )
        self._maybe_write()

    def finished(self, progress: SearchProgress) -> None:
        self._end(progress.index)

    def failed(self, index: int, error: Exception) -> None:
        self._end(index)

    def stage(self, name: str, done: int, total: int) -> None:
        if not total:  # nothing memorized: no stage to show
            return
        started = self.step is None or self.step["name"] != name
        self.step = {"name": name, "done": done, "total": total}
        if done < total:
            log.info("%s: %d/%d of the unit's memorized spans done", name, done, total)
        if started:  # a new stage is seen at once
            self._write()
        else:
            self._maybe_write()

    def _end(self, index: int) -> None:
        self.live.pop(index, None)
        self.done += 1
        self._maybe_write()

    def _maybe_write(self) -> None:
        if time.monotonic() - self.written >= self.every:
            self._write()

    def record(self) -> dict:
        """What progress/<unit>.json holds (storage/progress.py reads it back)."""
        # A copy first: the timer's thread reads while the unit's adds and removes searches.
        live = [
            {
                "candidate": p.index + 1,
                "span_id": self._span(p.index),
                "length": p.length,
                "trial": p.trial,
                "step": p.step,
                "steps": p.steps,
                "right": p.right,
                "target_tokens": p.target_tokens,
                "prompt_tokens": p.prompt_tokens,
                "total_steps": p.total_steps,
                "elapsed_s": round(p.elapsed(), 3),
            }
            for _, p in sorted(list(self.live.items()), key=lambda item: item[0])
        ]
        return {
            "unit": self.unit,
            "pid": os.getpid(),
            "candidates_done": self.done,
            "candidates_total": len(self.spans),
            "started": self.began,
            "heartbeat": time.time(),
            "live": live,
            **({"stage": self.step} if self.step else {}),
        }

    def _write(self) -> None:
        with self.lock:
            if self.closed:  # a timer's beat after the unit ended must not bring its file back
                return
            self.written = time.monotonic()
            try:
                write_progress(self.path, self.record())
            except OSError as err:  # a watcher's view is not worth the unit: the search goes on
                self._warn("record", err)

    def _warn(self, what: str, err: OSError) -> None:
        if not self.warned:  # once a unit: a full disk would otherwise say so every few seconds
            log.warning("could not %s the unit's progress in %s: %s", what, self.path, err)
            self.warned = True

    def close(self) -> None:
        """The unit committed or failed: it is no longer running (a file left behind shows its age)."""
        self.timer.stop()
        with self.lock:
            self.closed = True
        try:
            clear_progress(self.path)
        except OSError as err:  # never mask the unit's own error or lose its commit
            self._warn("remove", err)
