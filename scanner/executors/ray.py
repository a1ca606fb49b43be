"""The Ray executor: long-lived actors, each loading the model once, run the same tasks as the local
executor (on the worker `make_worker()` gives: screen shards, phase-2 units, passages) and commit them
into the run directory themselves; the driver only schedules, phase after phase (scanner/run/phases.py
calls `execute(tasks, admit, finished)` once per phase), with the same actors.

Scheduling: one task (a shard, a unit, the passages) in flight per actor, handed out from the saved plan
as actors free up, so a slow task never holds back another and at most `actors` tasks are in flight.
Fault tolerance: an actor that dies or becomes unreachable (kill -9, OOM, lost node, partition) is killed
and replaced and its task goes back to the queue, up to `max_retries` times per task; a task that still
fails is reported and stays pending, so relaunching the same command retries it. A task's files are
written atomically and whole, so a task that runs twice (a presumed-dead actor that was only slow)
replaces its part with equal rows: never a duplicate row.

A hung actor is alive to Ray, so it is found by its task's heartbeat file (run/heartbeat.py, watched by
executors/liveness.py): silent for --hung-after seconds, the task is given up like a dead actor's (the
actor killed and replaced, the task re-queued as a retry) and recorded for `status`. Without
--num-actors the actors follow the cluster: every POLL_S the driver sizes them to the resources its
nodes hold now, so the nodes an autoscaler adds are used and actors waiting for nodes that left retire.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, deque
from dataclasses import dataclass, field

from scanner import stop
from scanner.config import ExecutorConfig
from scanner.errors import InputError
from scanner.executors import Executor
from scanner.executors.liveness import POLL_S, Liveness
from scanner.storage.rundir import Shard

log = logging.getLogger(__name__)

INSTALL = "pip install 'ray[data]>=2.40'"
WAIT_S = 1.0  # the longest wait for a task before a stop request (scanner/stop.py) is looked at again


def import_ray():
    try:
        import ray
    except ImportError as err:
        raise InputError(f"--executor ray needs Ray, which is not installed ({err}); run {INSTALL}") from err
    return ray


class ShardWorker:
    """A Ray actor's state: the worker `make_worker()` gives (scanner/run/tasks.py), whose heavy
    objects are built in `setup()` inside the actor, never pickled. `run_task` runs any task of a scan."""

    def __init__(self, make_worker, cpus: float) -> None:
        self.worker, self.cpus = make_worker(), cpus

    def setup(self) -> dict:
        return self.worker.setup(cpus=self.cpus)

    def run_task(self, task) -> dict:
        # The node each task ran on: the report counts tasks by node, so a node that joined is seen used.
        return {**self.worker.run_task(task), "node": import_ray().get_runtime_context().get_node_id()}

    def close(self) -> None:
        self.worker.close()


def actor_shape(resources: dict, executor: ExecutorConfig) -> tuple[float, float]:
    """(GPUs, CPUs) per actor: --gpus-per-actor, else 1 where the cluster has GPUs (0: CPU actors)."""
    if executor.gpus_per_actor is not None:
        return executor.gpus_per_actor, executor.cpus_per_actor
    return (1.0 if resources.get("GPU", 0) else 0.0), executor.cpus_per_actor


def actors_fitting(resources: dict, gpus: float, cpus: float) -> int:
    """How many actors of this shape the cluster's resources hold (its nodes now, actors placed or not)."""
    if gpus:
        return int(resources.get("GPU", 0) // gpus)
    return int(resources.get("CPU", 0) // cpus)


def cluster_shape(ray, executor: ExecutorConfig, wait: bool = False) -> tuple[int, float, float]:
    """(actors, GPUs per actor, CPUs per actor) from the options and the cluster's resources. Too few
    for one actor: an error naming the fix, or with `wait` (a cluster nodes may join) one actor, which
    waits to be placed (its demand is what an autoscaler answers) after a log line."""
    resources = ray.cluster_resources()
    per_gpu, cpus = actor_shape(resources, executor)
    fits = actors_fitting(resources, per_gpu, cpus)
    actors = executor.num_actors if executor.num_actors is not None else fits
    gpus, cpu_total = resources.get("GPU", 0), resources.get("CPU", 0)
    if actors >= 1 and per_gpu <= gpus:
        return actors, per_gpu, cpus
    message = (
        f"the Ray cluster has {gpus:g} GPUs and {cpu_total:g} CPUs, too few for one actor with "
        f"--gpus-per-actor {per_gpu:g} and {cpus:g} CPUs"
    )
    if not wait:
        raise InputError(f"{message}; add nodes, or pass --gpus-per-actor 0 --num-actors N for CPU actors")
    log.warning("%s: waiting for a node to join (an autoscaler's, or `ray start --address`)", message)
    return max(actors, 1), per_gpu, cpus


@dataclass
class Scheduler:
    """The driver's bookkeeping: a queue of tasks, one per actor slot, attempts per task; the
    heartbeats of the tasks in flight (`liveness`) and, with `target`, as many slots as the cluster
    holds now."""

    ray: object
    make_actor: object  # () -> actor handle
    actors: int  # slots at the start; then the most there were at once (the report's)
    max_retries: int
    queue: deque = field(default_factory=deque)
    slots: dict = field(default_factory=dict)  # slot -> actor handle
    busy: dict = field(default_factory=dict)  # ObjectRef -> (slot, task or None for setup)
    attempts: Counter = field(default_factory=Counter)
    failed: dict = field(default_factory=dict)  # task key (_key) -> last error
    restarts: int = 0
    setup_deaths: Counter = field(default_factory=Counter)
    provenance: dict | None = None
    admit: object = None  # () -> bool: whether another queued task may start (the search budget)
    liveness: Liveness | None = None  # the heartbeats: a task silent too long is given up
    on_given_up: object = None  # (event) -> None: the record `status` counts
    target: object = None  # () -> int: the actors the cluster holds now; None: `actors`, fixed
    given_up: int = 0
    nodes: Counter = field(default_factory=Counter)  # node id -> tasks it ran
    looked: float = float("-inf")  # when heartbeats and nodes were last looked at (monotonic)

    def start(self) -> None:
        for slot in range(self.actors):
            self._spawn(slot)

    def _spawn(self, slot: int) -> None:
        actor = self.make_actor()
        self.slots[slot] = actor
        self.busy[actor.setup.remote()] = (slot, None)

    def _idle(self) -> list[int]:
        taken = {slot for slot, _ in self.busy.values()}
        return [slot for slot in self.slots if slot not in taken]

    def fill(self) -> None:
        for slot in self._idle():
            if self.queue and self.admit is not None and not self.admit():
                self.queue.clear()  # the budget is spent: what is queued is not searched
            if not self.queue:
                return
            task = self.queue.popleft()
            ref = self.slots[slot].run_task.remote(task)
            self.busy[ref] = (slot, task)
            if self.liveness:
                self.liveness.started(ref, task)

    def next_result(self):
        """Wait for one task; return (task, stats) when one finished, else None. Every POLL_S at
        most, also gives up silent tasks and follows the cluster's nodes (`look`)."""
        ray = self.ray
        self.look()
        if not self.busy:  # a task given up and its slot retired: the next fill hands it out
            return None
        poll = self._poll_s()  # and every WAIT_S at most: the caller looks at a stop request again
        ready, _ = ray.wait(
            list(self.busy), num_returns=1, timeout=WAIT_S if poll is None else min(poll, WAIT_S)
        )
        if not ready:
            return None
        slot, task = self.busy.pop(ready[0])
        if self.liveness:
            self.liveness.forget(ready[0])
        try:
            value = ray.get(ready[0])
        except ray.exceptions.RayActorError as err:
            self._actor_died(slot, task, err)
            return None
        except ray.exceptions.RayError as err:
            if task is None:  # the model or corpus cannot load: every actor would fail the same way
                raise InputError(f"a Ray actor could not set up: {_cause(err)}") from err
            self._retry(task, err)
            return None
        if task is None:
            # Setup deaths count in a row: a long run may lose many nodes, and a replacement placed on a
            # node that is dying (not yet seen dead) dies at setup once per loss.
            self.setup_deaths.pop(slot, None)
            self.provenance = self.provenance or value
            return None
        self.nodes[value.get("node")] += 1
        return task, value

    def _poll_s(self) -> float | None:
        if self.target is not None:
            return POLL_S
        return self.liveness.poll_s if self.liveness else None

    def look(self) -> None:
        """Give up the tasks whose heartbeat stopped, and size the slots to the cluster, when due."""
        poll = self._poll_s()
        if poll is None or time.monotonic() - self.looked < poll:
            return
        self.looked = time.monotonic()
        for ref, silent in self.liveness.silent() if self.liveness else []:
            self._give_up(ref, silent)
        if self.target is not None:
            self._resize(self.target())

    def _give_up(self, ref, silent: float) -> None:
        slot, task = self.busy.pop(ref)
        pid = self.liveness.pid(ref)
        self.liveness.forget(ref)
        self.given_up += 1
        log.warning(
            "%s: no heartbeat from its Ray actor %d (pid %s) for %.0f s (--hung-after %g); the actor is "
            "killed and the task re-queued",
            _label(task),
            slot,
            pid,
            silent,
            self.liveness.hung_after,
        )
        if self.on_given_up is not None:
            self.on_given_up(
                {
                    "task": _label(task),
                    "pid": pid,
                    "silent_s": round(silent, 1),
                    "hung_after_s": self.liveness.hung_after,
                    "time": time.time(),
                }
            )
        self._retry(task, TimeoutError(f"no heartbeat for {silent:.0f} s"))
        self._replace(slot)

    def _actor_died(self, slot: int, task, err: Exception) -> None:
        if task is None:
            self.setup_deaths[slot] += 1
            if self.setup_deaths[slot] > self.max_retries:
                raise RuntimeError(
                    f"Ray actor {slot} died {self.setup_deaths[slot]} times in a row while loading "
                    f"the model ({_cause(err)}); check its memory (--gpus-per-actor) and logs"
                )
        else:
            self._retry(task, err)
        # A slot holds one task at a time, so each death is seen once.
        replaced = self._replace(slot)
        log.warning(
            "Ray actor %d died (%s); %s",
            slot,
            _cause(err),
            "starting a new one" if replaced else f"not replaced: the cluster holds {len(self.slots)} now",
        )

    def _replace(self, slot: int) -> bool:
        """Kill the slot's actor and start a new one (True), or none where the cluster now holds fewer."""
        # Unreachable (ActorUnavailableError, a partition) or hung may not be dead: left alive, the old
        # actor would keep its CPUs or GPUs, and the replacement could never be placed. A dead one: a no-op.
        self.ray.kill(self.slots.pop(slot), no_restart=True)
        self.restarts += 1
        # At least one: with no node for an actor now, one waits to be placed (an autoscaler's demand).
        if self.target is None or len(self.slots) < max(self.target(), 1):
            self._spawn(slot)
            return True
        return False

    def _resize(self, want: int) -> None:
        """As many slots as the cluster holds actors (at least one): new slots as nodes join; still loading
        or idle ones retired as they leave (a running task's actor finishes it, or dies with its node)."""
        want = max(want, 1)
        while len(self.slots) < want:
            self._spawn(max(self.slots, default=-1) + 1)
            log.info("Ray: %d actors: a node joined", len(self.slots))
        # Loading ones first: one waiting for a node that left has done nothing, an idle one has the model.
        loading = [slot for slot, task in self.busy.values() if task is None]
        for slot in [*loading, *self._idle()][: max(0, len(self.slots) - want)]:
            self.busy = {ref: held for ref, held in self.busy.items() if held[0] != slot}
            self.ray.kill(self.slots.pop(slot), no_restart=True)
            log.info("Ray: %d actors: a node left", len(self.slots))
        self.actors = max(self.actors, len(self.slots))

    def _retry(self, task, err: Exception) -> None:
        key = _key(task)
        self.attempts[key] += 1
        if self.attempts[key] > self.max_retries:
            log.error("%s failed %d times, giving up: %s", _label(task), self.attempts[key], _cause(err))
            self.failed[key] = _cause(err)
            return
        log.warning("%s: %s; retry %d of %d", _label(task), _cause(err), self.attempts[key], self.max_retries)
        self.queue.appendleft(task)

    def done(self) -> bool:
        return not self.queue and all(task is None for _, task in self.busy.values())

    def run(self, finished, loaded=None) -> None:
        """Hand out every queued task: `finished(stats)` per task done, `loaded(meta)` once, when the
        first actor has loaded the model. Replacement actors still loading at the end are not waited for.
        Called again (the next phase), it reuses the actors it started."""
        if not self.slots:
            self.start()
        while True:
            self.fill()
            if (
                self.done() or stop.state() == stop.CUT
            ):  # a stop's grace is over: in-flight tasks stay pending
                return
            before = self.provenance
            result = self.next_result()
            if loaded and self.provenance and not before:
                loaded(self.provenance)
            if result:
                finished(result[1])


def _key(task):
    """Shards keep their number as the key of attempts and failures (the CLI names them); units their name."""
    return task.shard if isinstance(task, Shard) else task.name


def _label(task) -> str:
    return f"shard {task.shard:05d}" if isinstance(task, Shard) else task.name


def _cause(err: Exception) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[-1] if text else ''}"[:300]


def _init(ray, executor: ExecutorConfig) -> bool:
    """Connect to (or start) Ray; True when this call started it, so it is shut down after."""
    if ray.is_initialized():
        return False
    if executor.address is None:
        # A private local Ray; RAY_TMPDIR chooses its folder.
        ray.init(address="local", include_dashboard=False, configure_logging=False)
    else:
        ray.init(address=executor.address, configure_logging=False)
    return True


class RayExecutor(Executor):
    """`execute(tasks, admit, finished)` on Ray: one Scheduler (and its actors) for all the calls,
    started when the first call has work, so a relaunch of a finished run starts no actor. Connects to
    (or starts) Ray when made; `close()` stops the actors (and a Ray it started) and reports."""

    def __init__(
        self,
        executor: ExecutorConfig,
        make_worker,
        on_setup=None,
        expected_tasks: int = 1,
        beat_path=None,
        on_given_up=None,
    ) -> None:
        self.ray = import_ray()
        self.executor, self.make_worker, self.on_setup = executor, make_worker, on_setup
        self.expected_tasks = expected_tasks  # the largest call to come (shards), so actors are not too few
        # task -> its heartbeat file (run/heartbeat.py); event -> None, for each task given up as hung
        self.beat_path, self.on_given_up = beat_path, on_given_up
        self.scheduler: Scheduler | None = None
        self.started = _init(self.ray, executor)
        stop.reclaim()  # ray.init takes SIGTERM for itself: a stop request must reach the scheduler

    def _start(self, tasks: list) -> Scheduler:
        # A cluster joined by address may be waiting for its nodes (an autoscaler's): wait for them there;
        # a local Ray gains none, so too few resources is an error at once.
        actors, gpus, cpus = cluster_shape(self.ray, self.executor, wait=self.executor.address is not None)
        # More actors than tasks would only load idle models (phase 2 may have more units than shards).
        most = max(len(tasks), self.expected_tasks)
        actors = min(actors, most)
        remote = self.ray.remote(ShardWorker).options(num_gpus=gpus, num_cpus=cpus, max_restarts=0)
        make_worker, ray = self.make_worker, self.ray
        log.info(
            "Ray: %d actors (%g GPU, %g CPU each)%s",
            actors,
            gpus,
            cpus,
            "" if self.executor.num_actors else ", following the cluster's nodes as they join and leave",
        )
        target = (
            None
            if self.executor.num_actors
            else lambda: min(actors_fitting(ray.cluster_resources(), gpus, cpus), most)
        )
        return Scheduler(
            ray=ray,
            make_actor=lambda: remote.remote(make_worker, cpus),
            actors=actors,
            max_retries=self.executor.max_retries,
            target=target,
            on_given_up=self.on_given_up,
            liveness=Liveness(self.executor.hung_after, self.beat_path),
        )

    @property
    def workers(self) -> int:
        """Tasks in flight at once: the actors (a phase's deadline divides a budget of summed seconds by it).
        Tasks carry their own deadline (plain data), so the actors stop their searches at it too."""
        if self.scheduler is not None:
            return max(1, len(self.scheduler.slots))
        if self.executor.num_actors is not None:
            return max(1, min(self.executor.num_actors, self.expected_tasks))
        resources = self.ray.cluster_resources()
        return max(
            1, min(actors_fitting(resources, *actor_shape(resources, self.executor)), self.expected_tasks)
        )

    def set_up(self) -> None:
        """Nothing ahead: the first call that has tasks starts the actors (as many as it and the cluster
        allow), and each loads the model in its own setup there."""

    def __call__(self, tasks: list, admit, finished) -> dict:
        if not tasks:
            return {}
        self.scheduler = self.scheduler or self._start(tasks)
        scheduler = self.scheduler
        # a stop request (SIGTERM, SIGUSR1) admits nothing more; the tasks in flight may commit
        scheduler.queue, scheduler.admit = (
            deque(tasks),
            lambda: not stop.requested() and (admit is None or admit()),
        )
        before = dict(scheduler.failed)
        scheduler.run(finished=finished, loaded=self.on_setup)
        return {k: v for k, v in scheduler.failed.items() if k not in before}

    def close(self) -> dict:
        try:
            return {"executor": "ray", **self._stop_actors()}
        finally:
            if self.started:
                self.ray.shutdown()

    def _stop_actors(self) -> dict:
        scheduler = self.scheduler
        if scheduler is None:
            return {"actors": 0, "actor_restarts": 0, "retries": 0, "given_up": 0, "nodes": {}}
        # vLLM's engine processes stop cleanly before the actors go (a failed close is only logged). A busy
        # actor (loading, or running a task a stop left in flight) would answer only after its task: killed.
        busy = {slot for slot, _ in scheduler.busy.values()}
        closing = [actor.close.remote() for slot, actor in scheduler.slots.items() if slot not in busy]
        for ref in closing:
            try:
                self.ray.get(ref, timeout=60)
            except Exception as err:  # an actor that is gone or stuck is killed below anyway
                log.warning("closing a Ray actor: %s", _cause(err))
        for actor in scheduler.slots.values():
            self.ray.kill(actor)
        return {
            "actors": scheduler.actors,
            "actor_restarts": scheduler.restarts,
            "retries": sum(scheduler.attempts.values()),
            "given_up": scheduler.given_up,
            "nodes": {node: n for node, n in scheduler.nodes.items() if node},
        }
