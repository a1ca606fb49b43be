"""The corpus scan driver (local executor): validate, plan, then process pending shards in order.

Validation of the corpus and of the run directory happens before the model loads, so a bad input
costs seconds, not a model load; a relaunch of the same command resumes from the completion markers.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from scanner import __version__
from scanner.engine.build import build_engines
from scanner.engine.hf import HFEngine
from scanner.rundir import Plan, RunDir, Shard, atomic_write_json, config_hash
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
              "bos": engine.template.bos_policy, "device": engine.device, "dtype": engine.dtype,
              "verify_engine": json.dumps(engine.verify_info(), sort_keys=True),
              "screen_engine": json.dumps(engine.screen_info(), sort_keys=True)}
    return {k.encode(): str(v).encode() for k, v in values.items()}


def open_engine(config: ScanConfig) -> tuple[HFEngine, dict[bytes, bytes]]:
    """The one place a scan builds its engines (driver or Ray actor), with their provenance: vLLM
    first with its share of the GPU, then the HF model (engine/build.py)."""
    engine = build_engines(config.model, config.prompt, config.engines)
    return engine, provenance(config, engine)


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


def _searched(rows: list[dict]) -> int:
    return sum(r["status"] in ("memorized", "not_memorized", "failed") for r in rows)


def run_shard(engine: HFEngine, shard: Shard, docs: list[Document], config: ScanConfig,
              meta: dict[bytes, bytes], budget: int | None = None) -> tuple[pa.Table, dict]:
    start = time.perf_counter()
    tokenizer_id = meta[b"tokenizer_hash"].decode()[:16]
    rows: list[dict] = []
    for doc in docs:
        left = None if budget is None else max(budget - _searched(rows), 0)
        rows += process_document(engine, doc, config, shard.shard, tokenizer_id, left)
    table = pa.Table.from_pylist(rows, schema=results_schema()).replace_schema_metadata(meta)
    counts = Counter(r["status"] for r in rows)
    stats = {"documents": len(docs), "spans": len(rows), "rows": len(rows), "status_counts": dict(counts),
             "candidates": counts["memorized"] + counts["not_memorized"] + counts["failed"],
             "memorized": counts["memorized"], "seconds": time.perf_counter() - start,
             "screen_s": sum(r["screen_s"] for r in rows), "search_s": sum(r["search_s"] for r in rows)}
    return table, stats


def with_failures(run: RunDir, plan: Plan) -> list[Shard]:
    """Done shards holding `failed` rows: a relaunch re-runs them (filtered rows count as done,
    failed ones do not); per-span seeds make the re-run reproduce every other row exactly."""
    done = set(run.done_shards())
    return [s for s in plan if s.shard in done
            and json.loads(run.stats_path(s.shard).read_text()).get("status_counts", {}).get("failed", 0)]


def _spent(run: RunDir, pending: list[Shard]) -> int:
    """Candidates searched by the shards that stay done (the local executor runs shards in order, so
    these come first in the corpus)."""
    rerun = {s.shard for s in pending}
    return sum(json.loads(run.stats_path(i).read_text()).get("candidates", 0)
               for i in run.done_shards() if i not in rerun)


@contextlib.contextmanager
def shard_log(path: Path):
    """Everything logged while a shard runs also goes to logs/shard-NNNNN.log."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, mode="a", encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    level = root.level
    consoles = [(h, h.level) for h in root.handlers]
    for h, h_level in consoles:  # the file gets INFO; the terminal keeps the verbosity asked for
        h.setLevel(max(h_level, level))
    root.addHandler(handler)
    root.setLevel(min(level, logging.INFO))
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        for h, h_level in consoles:
            h.setLevel(h_level)
        handler.close()


def prepare_run(config: ScanConfig, out: str) -> tuple[Corpus, RunDir, Plan]:
    corpus = open_corpus(config.corpus)
    run = RunDir(out)
    plan = run.prepare(config.to_dict(), corpus.fingerprint(), corpus.num_rows, config.docs_per_shard)
    return corpus, run, plan


def run_scan(config: ScanConfig, out: str, progress=None) -> dict:
    """Scan the corpus into `out`; returns the merged stats. `progress(stats)` is called per shard."""
    corpus, run, plan = prepare_run(config, out)
    pending = sorted(run.pending(plan) + with_failures(run, plan), key=lambda s: s.shard)
    log.info("%d of %d shards pending in %s", len(pending), len(plan), out)
    if pending:
        engine, meta = open_engine(config)
        # Model and tokenizer identities are known only once loaded: beside run_config.json.
        atomic_write_json(run.path / "provenance.json", {k.decode(): v.decode() for k, v in meta.items()})
        budget = None if config.max_candidates is None else config.max_candidates - _spent(run, pending)
        for shard, docs in shard_documents(corpus, plan, pending):
            with shard_log(run.log_path(shard.shard)):
                table, stats = run_shard(engine, shard, docs, config, meta, budget)
            budget = None if budget is None else budget - stats["candidates"]
            run.write_shard(shard.shard, table, stats)
            if progress:
                progress(stats)
    return run.merge_stats()
