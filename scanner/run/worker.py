"""What every worker of a run does before its first task, whichever executor runs it: load the engines
once, check that the files loaded are the bytes the run recorded, open the corpus. A scan's Worker
(run/tasks.py) and a comparison's (run/compare_spans.py) build on it; heavy objects are made in
`setup()` where the worker runs, never pickled, so a Ray actor gets configs and paths only."""

from __future__ import annotations

from pathlib import Path

from scanner.config import ScanConfig
from scanner.run.model_record import check_loaded
from scanner.run.shard import open_engine


class ModelWorker:
    """`config`: the scan configuration whose model and corpus the worker uses; `out`: the run folder,
    whose model.json the loaded files are checked against; `corpus`: the driver's, already validated (a
    Ray actor opens its own); `seen`: the driver's stamps of the model files, for a worker in its process."""

    def __init__(self, config: ScanConfig, out: str, corpus=None, seen: dict | None = None) -> None:
        self.config, self.folder = config, Path(out)
        self.engine = self.meta = None
        self.corpus, self.seen = corpus, seen

    def setup(self, cpus: float | None = None) -> dict:
        """Load the engines (once) and open the corpus; returns the provenance for provenance.json.
        `cpus`: the actor's share, which torch's thread pool is held to unless --threads says otherwise."""
        from scanner.stages.read import open_corpus

        if cpus is not None and self.config.model.threads is None:  # torch would size its pool to the node
            import torch

            torch.set_num_threads(max(1, int(cpus)))
        if self.engine is None:
            self.engine, self.meta = open_engine(self.config)
            # The files just loaded are the run's recorded bytes, or this worker measures nothing.
            self.meta[b"model_hash"] = check_loaded(self.folder, self.config.model, self.seen).encode()
        self.corpus = self.corpus or open_corpus(self.config.corpus)  # from shared storage where it runs
        return {k.decode(): v.decode() for k, v in self.meta.items()}

    def ready(self) -> None:
        if self.engine is None:
            self.setup()

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
