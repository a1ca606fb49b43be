"""The executor contract (scanner/executors `Executor`): what the phases need of where tasks run, which
the local and Ray executors declare and the phases check before they hand out a task."""

import pytest

from scanner import stop
from scanner.executors import Executor
from scanner.executors.local import LocalExecutor
from scanner.executors.ray import RayExecutor
from scanner.run.phases import PhaseExecutor, run_phases


class FakeWorker:
    def __init__(self) -> None:
        self.setups, self.ran, self.closed = 0, [], False

    def setup(self) -> dict:
        self.setups += 1
        return {"model": "fake"}

    def run_task(self, task) -> dict:
        self.ran.append(task)
        return {"task": task}

    def close(self) -> None:
        self.closed = True


def test_the_local_executor_is_an_executor_that_sets_its_worker_up_once():
    worker, loaded, done = FakeWorker(), [], []
    execute = LocalExecutor(lambda: worker, loaded.append)
    assert isinstance(execute, Executor) and execute.workers == 1
    execute.set_up()  # the model loads before a phase's clock starts
    assert worker.setups == 1 and loaded == [{"model": "fake"}] and worker.ran == []
    assert execute([1, 2, 3], lambda: len(done) < 2, done.append) == {}
    assert worker.setups == 1 and worker.ran == [1, 2] and done == [{"task": 1}, {"task": 2}]
    assert execute.close() == {"executor": "local"} and worker.closed


def test_the_ray_executor_defines_all_the_phases_call():
    assert Executor in RayExecutor.__mro__
    assert {"__call__", "set_up", "close", "workers"} <= set(vars(RayExecutor))


def test_the_phases_refuse_what_is_not_an_executor():
    def bare(tasks, admit, finished) -> dict:  # no workers, set_up or close: the phases would guess them
        return {}

    assert not isinstance(bare, Executor)
    with pytest.raises(TypeError, match="not one"):
        run_phases(None, bare)


def test_the_phases_executor_counts_finished_tasks_and_stops_after_a_call_with_a_stop_request():
    worker = FakeWorker()
    execute = PhaseExecutor(LocalExecutor(lambda: worker))
    assert isinstance(execute, Executor) and execute.workers == 1
    assert execute([1, 2], None, lambda stats: None) == {} and execute.finished == 2

    def stopping(stats: dict) -> None:
        stop.request("a test's stop")

    try:
        with pytest.raises(stop.Stopped):
            execute([3, 4], None, stopping)
    finally:
        stop.reset()
    assert worker.ran == [1, 2, 3] and execute.finished == 3  # no task starts after the request


def test_the_phases_read_the_workers_the_executor_has_when_they_ask():
    """A phase's seconds deadline divides the budget by the workers: those of the moment it is computed
    (after set_up, on Ray the actors that started and the nodes that joined), not a count from before."""

    class Growing(LocalExecutor):
        workers = 1

    inner = Growing(FakeWorker)
    execute = PhaseExecutor(inner)
    assert execute.workers == 1
    inner.workers = 3  # two nodes joined and their actors started
    assert execute.workers == 3
