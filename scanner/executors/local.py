"""The local executor: every task in order, in this process, on one worker, with one model load (made
on the first task, so a relaunch of a finished run loads nothing)."""

from __future__ import annotations

from scanner import stop
from scanner.executors import Executor


class LocalExecutor(Executor):
    """`execute(tasks, admit, finished)` in this process. `make_worker()` gives the worker (setup,
    run_task, close); `on_setup(meta)` is called once, when the worker has loaded the model."""

    workers = 1  # tasks in flight at once

    def __init__(self, make_worker, on_setup=None) -> None:
        self.worker, self.on_setup, self.ready = make_worker(), on_setup, False

    def __call__(self, tasks: list, admit, finished) -> dict:
        """Run `tasks` in order while `admit()` allows and no stop was requested (scanner/stop.py);
        `finished(stats)` after each commit. A task that raises stops the scan (nothing is retried
        in-process): {} on success."""
        for task in tasks:
            if stop.requested() or (admit is not None and not admit()):
                break
            finished(self._ready().run_task(task))
        return {}

    def set_up(self) -> None:
        """Set the worker up now (the model loads), before a phase starts a clock."""
        self._ready()

    def _ready(self):
        if not self.ready:
            meta = self.worker.setup()
            self.ready = True
            if self.on_setup is not None:
                self.on_setup(meta)
        return self.worker

    def close(self) -> dict:
        self.worker.close()
        return {"executor": "local"}
