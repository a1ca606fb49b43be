"""The local executor: shards in corpus order, in this process, with one model load."""

from __future__ import annotations

from collections.abc import Iterator

from scanner.atomic import atomic_write_json
from scanner.rundir import Plan, RunDir, Shard
from scanner.runner import ScanConfig, open_engine, run_shard, shard_log
from scanner.stages.read import Corpus, Document


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


def spent(run: RunDir, pending: list[Shard]) -> int:
    """Candidates searched by the shards that stay done (shards run in order, so these come first
    in the corpus)."""
    rerun = {s.shard for s in pending}
    return sum(run.shard_stats(i).get("candidates", 0)
               for i in run.done_shards() if i not in rerun)


def write_provenance(run: RunDir, meta: dict[bytes, bytes]) -> None:
    # Model and tokenizer identities are known only once loaded: beside run_config.json.
    atomic_write_json(run.path / "provenance.json", {k.decode(): v.decode() for k, v in meta.items()})


def run_local(config: ScanConfig, corpus: Corpus, run: RunDir, plan: Plan, pending: list[Shard],
              progress=None, after=None) -> dict:
    """`after(engine)`: called once the shards are done, before the engine closes (passages)."""
    engine, meta = open_engine(config)
    write_provenance(run, meta)
    budget = None if config.max_candidates is None else config.max_candidates - spent(run, pending)
    try:
        for shard, docs in shard_documents(corpus, plan, pending):
            with shard_log(run.log_path(shard.shard)):
                table, stats = run_shard(engine, shard, docs, config, meta, budget)
            budget = None if budget is None else budget - stats["candidates"]
            run.write_shard(shard.shard, table, stats)
            if progress:
                progress(stats)
        if after is not None:
            after(engine)
    finally:
        engine.close()
    return {"executor": "local", "failed_shards": {}}
