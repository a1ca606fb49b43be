"""The corpus scan driver (local executor): validate, plan, then process pending shards in order.

Validation of the corpus and of the run directory happens before the model loads, so a bad input
costs seconds, not a model load; a relaunch of the same command resumes from the completion markers.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from scanner import __version__
from scanner.engine.hf import HFEngine
from scanner.engine.loading import load_model
from scanner.rundir import Plan, RunDir, Shard, config_hash
from scanner.runner import ScanConfig, process_document
from scanner.schema import results_schema
from scanner.stages.read import Corpus, Document, open_corpus

log = logging.getLogger(__name__)


def tokenizer_hash(tokenizer) -> str:
    return hashlib.sha256(tokenizer.backend_tokenizer.to_str().encode()).hexdigest()


def model_hash(model: str) -> str:
    """A cheap identity of local weights: names and sizes of the files, and config.json's bytes."""
    path = Path(model)
    if not path.exists():
        return ""
    files = [path] if path.is_file() else sorted(p for p in path.iterdir() if p.is_file())
    digest = hashlib.sha256()
    for f in files:
        digest.update(f"{f.name}:{f.stat().st_size}".encode())
        if f.name == "config.json":
            digest.update(f.read_bytes())
    return digest.hexdigest()


def provenance(config: ScanConfig, engine: HFEngine) -> dict[bytes, bytes]:
    values = {"model": config.model.model, "model_revision": config.model.revision or "",
              "model_hash": model_hash(config.model.model), "tokenizer_hash": tokenizer_hash(engine.tokenizer),
              "package_version": __version__, "config_hash": config_hash(config.to_dict()),
              "bos": engine.template.bos_policy, "device": engine.device, "dtype": engine.dtype}
    return {k.encode(): str(v).encode() for k, v in values.items()}


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


def run_shard(engine: HFEngine, shard: Shard, docs: list[Document], config: ScanConfig,
              meta: dict[bytes, bytes]) -> tuple[pa.Table, dict]:
    start = time.perf_counter()
    tokenizer_id = meta[b"tokenizer_hash"].decode()[:16]
    rows = [row for doc in docs for row in process_document(engine, doc, config, shard.shard, tokenizer_id)]
    table = pa.Table.from_pylist(rows, schema=results_schema()).replace_schema_metadata(meta)
    counts = Counter(r["status"] for r in rows)
    stats = {"documents": len(docs), "spans": len(rows), "rows": len(rows), "status_counts": dict(counts),
             "candidates": counts["memorized"] + counts["not_memorized"] + counts["failed"],
             "memorized": counts["memorized"], "seconds": time.perf_counter() - start,
             "screen_s": sum(r["screen_s"] for r in rows), "search_s": sum(r["search_s"] for r in rows)}
    return table, stats


def prepare_run(config: ScanConfig, out: str) -> tuple[Corpus, RunDir, Plan]:
    corpus = open_corpus(config.corpus)
    run = RunDir(out)
    plan = run.prepare(config.to_dict(), corpus.fingerprint(), corpus.num_rows, config.docs_per_shard)
    return corpus, run, plan


def run_scan(config: ScanConfig, out: str, progress=None) -> dict:
    """Scan the corpus into `out`; returns the merged stats. `progress(stats)` is called per shard."""
    corpus, run, plan = prepare_run(config, out)
    pending = run.pending(plan)
    log.info("%d of %d shards pending in %s", len(pending), len(plan), out)
    if pending:
        engine = HFEngine(load_model(config.model), config.prompt)
        meta = provenance(config, engine)
        for shard, docs in shard_documents(corpus, plan, pending):
            table, stats = run_shard(engine, shard, docs, config, meta)
            run.write_shard(shard.shard, table, stats)
            if progress:
                progress(stats)
    return run.merge_stats()
