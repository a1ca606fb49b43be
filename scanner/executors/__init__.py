"""Executors decide *where* tasks run: `execute(tasks, admit, finished)` runs each task on a worker
(in this process, or in long-lived Ray actors) and reports each finished task's stats; the phases
(scanner/run/phases.py) decide *what* runs. Their config, ExecutorConfig, lives in scanner/config.py.
`Executor` is all the phases and the driver need of one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable


@runtime_checkable
class Executor(Protocol):
    """Where a run's tasks run (executors/local.py, executors/ray.py); it never calls back into the phases."""

    workers: int  # tasks in flight at once: a seconds budget's deadline divides the seconds left among them

    def __call__(
        self, tasks: list, admit: Callable[[], bool] | None, finished: Callable[[dict], None]
    ) -> dict:
        """Run `tasks` in order while `admit()` allows (None: all) and no stop was requested, calling
        `finished(stats)` after each task commits; returns {task name: error} of those that failed for good."""
        ...

    def set_up(self) -> None:
        """Set the workers up now where that can be done ahead (the model loads), before a phase starts a clock."""
        ...

    def close(self) -> dict:
        """Stop the workers; returns the executor's report (the run's "run" stats)."""
        ...
