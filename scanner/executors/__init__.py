"""Executors decide *where* shards run; every one runs the same `run_shard` and commits through RunDir."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from scanner.errors import require

EXECUTORS = ("local", "ray")


@dataclass(frozen=True, kw_only=True)
class ExecutorConfig:
    """Where the scan runs. Not part of the run's identity: a run may resume under another executor
    (both give equal tables), so this is kept out of run_config.json's hash."""

    kind: str = "local"
    address: str | None = None  # ray: None starts a local Ray; "auto" joins the cluster this job runs in
    num_actors: int | None = None  # ray: None means one per GPU slot, else one per CPU slot
    gpus_per_actor: float | None = None  # ray: None means 1 where the cluster has GPUs, else 0
    cpus_per_actor: float = 1.0
    max_retries: int = 3  # ray: infrastructure failures (actor died, node lost) per shard

    def __post_init__(self) -> None:
        require(self.kind in EXECUTORS, f"--executor {self.kind!r} is not one of {', '.join(EXECUTORS)}")
        require(self.num_actors is None or self.num_actors >= 1, f"--num-actors {self.num_actors} must be >= 1")
        require(self.gpus_per_actor is None or self.gpus_per_actor >= 0,
                f"--gpus-per-actor {self.gpus_per_actor} must be >= 0 (0: CPU actors)")
        require(self.cpus_per_actor > 0, f"--cpus-per-actor {self.cpus_per_actor} must be > 0")
        require(self.max_retries >= 0, f"--max-retries {self.max_retries} must be >= 0")
        if self.kind == "local":
            given = [name for name, value in (("--ray-address", self.address), ("--num-actors", self.num_actors),
                                              ("--gpus-per-actor", self.gpus_per_actor)) if value is not None]
            require(not given, f"{', '.join(given)} only apply to --executor ray; add --executor ray or drop them")

    def to_dict(self) -> dict:
        return asdict(self)
