"""The local executor: every task in order, in this process, with one model load (made on the first
task, so a relaunch of a finished run loads nothing)."""

from __future__ import annotations

from collections.abc import Iterator

from scanner.config import ScanConfig
from scanner.run.phases import Phases, run_phases
from scanner.run.tasks import Worker
from scanner.stages.read import Corpus, Document
from scanner.storage.atomic import atomic_write_json
from scanner.storage.rundir import Plan, RunDir, Shard


def shard_documents(corpus: Corpus, plan: Plan, pending: list[Shard]) -> Iterator[tuple[Shard, list[Document]]]:
    """One pass over the corpus, yielding the documents of each pending shard."""
    wanted = {s.shard: s for s in pending}
    by_index = {i: s for s in pending for i in range(s.doc_start, s.doc_end)}
    current: list[Document] = []
    for index, doc in enumerate(corpus.iter_documents()):
        shard = by_index.get(index)
        if shard is None:
            continue
        current.append(doc)
        if index == shard.doc_end - 1:
            yield wanted[shard.shard], current
            current = []


def write_provenance(run: RunDir, meta: dict[bytes, bytes]) -> None:
    # Model and tokenizer identities are known only once loaded: beside run_config.json.
    atomic_write_json(run.path / "provenance.json", {k.decode(): v.decode() for k, v in meta.items()})


class LocalExecutor:
    def __init__(self, config: ScanConfig, corpus: Corpus, run: RunDir, plan: Plan) -> None:
        self.corpus, self.run, self.plan = corpus, run, plan
        self.worker = Worker(config, str(run.path))

    def _ready(self) -> Worker:
        if self.worker.engine is None:
            self.worker.setup(self.corpus)
            write_provenance(self.run, self.worker.meta)
        return self.worker

    def __call__(self, tasks: list, admit, finished) -> dict:
        """Run `tasks` in order while `admit()` allows; `finished(stats)` after each commit."""
        shards = [t for t in tasks if isinstance(t, Shard)]
        if shards:  # screen shards read the corpus in one pass
            for shard, docs in shard_documents(self.corpus, self.plan, shards):
                finished(self._ready().run_task(shard, docs))
            return {}
        for task in tasks:
            if admit is not None and not admit():
                break
            finished(self._ready().run_task(task))
        return {}


def run_local(config: ScanConfig, corpus: Corpus, run: RunDir, plan: Plan, progress=None, after=None) -> dict:
    """`after(engine)`: called once the phases are done, before the engine closes (passages); the
    engine is None when this launch loaded none (a relaunch of a finished run)."""
    execute = LocalExecutor(config, corpus, run, plan)
    try:
        run_phases(Phases(config, run, plan), execute, progress)
        if after is not None:
            after(execute.worker.engine)
    finally:
        execute.worker.close()
    return {"executor": "local", "failed_shards": {}}
