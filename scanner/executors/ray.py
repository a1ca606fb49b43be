"""The Ray executor: long-lived actors, each loading the model once, run the same `run_shard` as the
local executor and commit shards into the run directory themselves; the driver only schedules.

Scheduling: one shard in flight per actor, handed out from the saved plan as actors free up, so a slow
shard never holds back another and at most `actors` shards are in flight. Fault tolerance: an actor
that dies or becomes unreachable (kill -9, OOM, lost node, partition) is killed and replaced and its
shard goes back to the queue, up to `max_retries` times per shard; a shard that still fails is
reported and stays pending, so relaunching the same command retries it. Shard files are written atomically and whole, so a shard that runs twice
(a presumed-dead actor that was only slow) replaces itself with equal rows: never a duplicate row.
"""

from __future__ import annotations

import logging
import os
from collections import Counter, deque
from dataclasses import dataclass, field

from scanner.errors import InputError
from scanner.executors import ExecutorConfig
from scanner.executors.local import write_provenance
from scanner.rundir import RunDir, Shard
from scanner.runner import ScanConfig, open_engine, run_shard, shard_log
from scanner.stages.read import open_corpus

log = logging.getLogger(__name__)

INSTALL = "pip install 'ray[data]>=2.40'"


def import_ray():
    try:
        import ray
    except ImportError as err:
        raise InputError(f"--executor ray needs Ray, which is not installed ({err}); run {INSTALL}") from err
    return ray


class ShardWorker:
    """A Ray actor's state. Heavy objects are built in `setup()` inside the actor, never pickled."""

    def __init__(self, config: ScanConfig, out: str, cpus: float) -> None:
        self.config, self.run, self.cpus = config, RunDir(out), cpus
        self.engine = self.meta = self.corpus = None

    def setup(self) -> dict:
        if self.config.model.threads is None:  # torch would otherwise size its pool to the whole node
            import torch

            torch.set_num_threads(max(1, int(self.cpus)))
        self.engine, self.meta = open_engine(self.config)
        self.corpus = open_corpus(self.config.corpus)  # workers read the corpus from shared storage
        return {k.decode(): v.decode() for k, v in self.meta.items()}

    def run_shard(self, shard: Shard) -> dict:
        docs = self.corpus.documents(shard.doc_start, shard.doc_end)
        with shard_log(self.run.log_path(shard.shard)):
            table, stats = run_shard(self.engine, shard, docs, self.config, self.meta)
        self.run.write_shard(shard.shard, table, stats)
        return {**stats, "shard": shard.shard, "pid": os.getpid()}

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()


def cluster_shape(ray, executor: ExecutorConfig) -> tuple[int, float, float]:
    """(actors, GPUs per actor, CPUs per actor) from the options and the cluster's resources."""
    resources = ray.cluster_resources()
    gpus, cpus = resources.get("GPU", 0), resources.get("CPU", 0)
    per_gpu = executor.gpus_per_actor if executor.gpus_per_actor is not None else (1.0 if gpus else 0.0)
    if executor.num_actors is not None:
        actors = executor.num_actors
    elif per_gpu:
        actors = int(gpus // per_gpu)
    else:
        actors = int(cpus // executor.cpus_per_actor)
    if actors < 1 or per_gpu > gpus:
        raise InputError(f"the Ray cluster has {gpus:g} GPUs and {cpus:g} CPUs, too few for one actor with "
                         f"--gpus-per-actor {per_gpu:g} and {executor.cpus_per_actor:g} CPUs; add nodes, or "
                         "pass --gpus-per-actor 0 --num-actors N for CPU actors")
    return actors, per_gpu, executor.cpus_per_actor


@dataclass
class Scheduler:
    """The driver's bookkeeping: a queue of shards, one task per actor slot, attempts per shard."""

    ray: object
    make_actor: object  # () -> actor handle
    actors: int
    max_retries: int
    queue: deque = field(default_factory=deque)
    slots: dict = field(default_factory=dict)  # slot -> actor handle
    busy: dict = field(default_factory=dict)  # ObjectRef -> (slot, shard or None for setup)
    attempts: Counter = field(default_factory=Counter)
    failed: dict = field(default_factory=dict)  # shard -> last error
    restarts: int = 0
    setup_deaths: Counter = field(default_factory=Counter)
    provenance: dict | None = None

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
            if not self.queue:
                return
            shard = self.queue.popleft()
            self.busy[self.slots[slot].run_shard.remote(shard)] = (slot, shard)

    def next_result(self):
        """Wait for one task; return (shard, stats) when a shard finished, else None."""
        ray = self.ray
        [ref], _ = ray.wait(list(self.busy), num_returns=1)
        slot, shard = self.busy.pop(ref)
        try:
            value = ray.get(ref)
        except ray.exceptions.RayActorError as err:
            self._actor_died(slot, shard, err)
            return None
        except ray.exceptions.RayError as err:
            if shard is None:  # the model or corpus cannot load: every actor would fail the same way
                raise InputError(f"a Ray actor could not set up: {_cause(err)}") from err
            self._retry(shard, err)
            return None
        if shard is None:
            # Setup deaths count in a row: a long run may lose many nodes, and a replacement placed on a
            # node that is dying (not yet seen dead) dies at setup once per loss.
            self.setup_deaths.pop(slot, None)
            self.provenance = self.provenance or value
            return None
        return shard, value

    def _actor_died(self, slot: int, shard: Shard | None, err: Exception) -> None:
        if shard is None:
            self.setup_deaths[slot] += 1
            if self.setup_deaths[slot] > self.max_retries:
                raise RuntimeError(f"Ray actor {slot} died {self.setup_deaths[slot]} times in a row while loading "
                                   f"the model ({_cause(err)}); check its memory (--gpus-per-actor) and logs")
        else:
            self._retry(shard, err)
        # A slot holds one task at a time, so each death is seen once.
        log.warning("Ray actor %d died (%s); starting a new one", slot, _cause(err))
        # Unreachable (ActorUnavailableError, a partition) may not be dead: left alive, the old actor
        # would keep its CPUs or GPUs, and the replacement could never be placed. A dead one: a no-op.
        self.ray.kill(self.slots[slot], no_restart=True)
        self.restarts += 1
        self._spawn(slot)

    def _retry(self, shard: Shard, err: Exception) -> None:
        self.attempts[shard.shard] += 1
        if self.attempts[shard.shard] > self.max_retries:
            log.error("shard %05d failed %d times, giving up: %s", shard.shard, self.attempts[shard.shard],
                      _cause(err))
            self.failed[shard.shard] = _cause(err)
            return
        log.warning("shard %05d: %s; retry %d of %d", shard.shard, _cause(err), self.attempts[shard.shard],
                    self.max_retries)
        self.queue.appendleft(shard)

    def done(self) -> bool:
        return not self.queue and all(shard is None for _, shard in self.busy.values())

    def run(self, finished, loaded=None) -> None:
        """Hand out every queued shard: `finished(stats)` per shard done, `loaded(meta)` once, when the
        first actor has loaded the model. Replacement actors still loading at the end are not waited for."""
        self.start()
        while True:
            self.fill()
            if self.done():
                return
            before = self.provenance
            result = self.next_result()
            if loaded and self.provenance and not before:
                loaded(self.provenance)
            if result:
                finished(result[1])


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


def run_ray(config: ScanConfig, run: RunDir, pending: list[Shard], executor: ExecutorConfig,
            progress=None) -> dict:
    ray = import_ray()
    started = _init(ray, executor)
    try:
        return _schedule(ray, config, run, pending, executor, progress)
    finally:
        if started:
            ray.shutdown()


def _schedule(ray, config: ScanConfig, run: RunDir, pending: list[Shard], executor: ExecutorConfig,
              progress) -> dict:
    actors, gpus, cpus = cluster_shape(ray, executor)
    actors = min(actors, len(pending))  # more actors than shards would only load idle models
    remote = ray.remote(ShardWorker).options(num_gpus=gpus, num_cpus=cpus, max_restarts=0)
    out = str(run.path.resolve())
    scheduler = Scheduler(ray=ray, make_actor=lambda: remote.remote(config, out, cpus), actors=actors,
                          max_retries=executor.max_retries, queue=deque(pending))
    log.info("Ray: %d actors (%g GPU, %g CPU each) for %d shards", actors, gpus, cpus, len(pending))
    scheduler.run(finished=progress or (lambda stats: None),
                  loaded=lambda meta: write_provenance(run, {k.encode(): v.encode() for k, v in meta.items()}))
    # vLLM's engine processes stop cleanly before the actors go (a failed close is only logged).
    loading = {slot for slot, shard in scheduler.busy.values() if shard is None}
    closing = [actor.close.remote() for slot, actor in scheduler.slots.items() if slot not in loading]
    for ref in closing:
        try:
            ray.get(ref, timeout=60)
        except Exception as err:  # an actor that is gone or stuck is killed below anyway
            log.warning("closing a Ray actor: %s", _cause(err))
    for actor in scheduler.slots.values():
        ray.kill(actor)
    return {"executor": "ray", "actors": actors, "actor_restarts": scheduler.restarts,
            "retries": sum(scheduler.attempts.values()), "failed_shards": dict(scheduler.failed)}
