"""RUN/passages.parquet: the memorized passages of a finished scan, built once all shards are done.

`write_passages` is the one entry point that builds the table (merge: scanner/measures/passages.py; extension:
stages/extend.py) on an engine the caller owns; `ensure_passages` decides whether it must run and where:
on the local executor's engine before it closes, in the driver for a relaunch of a finished run, or in
one Ray task with an actor's resources. The table records a fingerprint of the results (every done
marker's checksum) and of the passage settings, so a relaunch rebuilds it only when it is missing or
stale: a shard recomputed, or another --extend-tokens.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from scanner.config import PassageConfig
from scanner.errors import require
from scanner.measures.passages import MEMORIZED, find_passages, passage_rows, with_extension
from scanner.schema import PASSAGES_VERSION, passages_schema, results_schema
from scanner.stages.extend import DocumentTokens, extend_passages
from scanner.stages.spans import tokenize_document
from scanner.storage.atomic import atomic_write
from scanner.storage.integrity import read_json_object
from scanner.storage.rundir import RunDir

if TYPE_CHECKING:  # the engine (torch) loads only where a table is built, never for export or report
    from scanner.config import ScanConfig
    from scanner.stages.read import Corpus, Document

log = logging.getLogger(__name__)

PASSAGES_FILE = "passages.parquet"
FINGERPRINT_KEY = b"results_fingerprint"
# What the merge and the extension read from the results; acr_kind and the calibration columns where the
# results schema has them.
READ = ("doc_id", "doc_row", "span_id", "char_start", "char_end", "token_start", "token_end", "text",
        "target_tokens", "status", "acr", "prompt", "prompt_tokens", "certificate_prompt", "shard")
OPTIONAL = ("acr_kind", "calibrated_memorized")


def passages_path(run: RunDir):
    return run.path / PASSAGES_FILE


def fingerprint(run: RunDir, passages: PassageConfig) -> str:
    """sha256 over every done marker (shard, rows, results checksum) and the passage settings."""
    markers = [read_json_object(run.done_path(shard)) or {"shard": shard} for shard in run.done_shards()]
    blob = json.dumps({"markers": markers, "extend_tokens": passages.extend_tokens, "version": PASSAGES_VERSION},
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def is_current(run: RunDir, passages: PassageConfig) -> bool:
    path = passages_path(run)
    try:
        metadata = pq.read_schema(path).metadata or {}
    except (OSError, pa.ArrowException):
        return False  # missing or damaged: build it again
    return metadata.get(FINGERPRINT_KEY) == fingerprint(run, passages).encode()


def read_passages(run: RunDir) -> pa.Table:
    """The run's passages table (export, report); InputError naming the fix when there is none."""
    path = passages_path(run)
    require(path.is_file(), f"'{run.path}' has no {PASSAGES_FILE} (the scan is unfinished, or was made before "
            "passages existed); relaunch the same scan command: finished shards are kept and only the "
            "passages are built")
    return pq.read_table(path)


def _results(run: RunDir) -> tuple[list[dict], dict]:
    names = results_schema().names
    table = run.read_results(columns=list(READ) + [c for c in OPTIONAL if c in names])
    return table.to_pylist(), table.schema.metadata or {}


def _documents(run: RunDir, corpus: Corpus, keys: set[str], shards: set[int]) -> dict[str, Document]:
    """The documents that hold passages, read shard by shard (only the row groups they need)."""
    plan = {s.shard: s for s in run.load_plan()}
    docs = {}
    for shard in sorted(shards):
        for doc in corpus.documents(plan[shard].doc_start, plan[shard].doc_end):
            key = doc.row if doc.row in keys else doc.doc_id
            if key in keys and doc.text is not None:
                docs[key] = doc
    return docs


def write_passages(run: RunDir, config: ScanConfig, corpus: Corpus, engine=None,
                   passages: PassageConfig | None = None) -> pa.Table:
    """Build and atomically write RUN/passages.parquet from the finished shards; returns the table.
    `engine`: the scan's HF engine (vLLM attached or not), needed only to extend (extend_tokens > 0)."""
    passages = passages or PassageConfig()
    rows, metadata = _results(run)
    found = find_passages(rows)
    shards = {s["shard"] for p in found for s in p.spans}
    docs = _documents(run, corpus, {p.key for p in found}, shards)
    tokenizer_id = metadata.get(b"tokenizer_hash", b"").decode()[:16]
    table_rows = passage_rows(rows, tokenizer_id, {k: d.text for k, d in docs.items()})
    if passages.extend_tokens and found:
        require(engine is not None, "write_passages: extension needs an engine (or pass extend_tokens 0)")
        tokens = {k: DocumentTokens(d.text, *tokenize_document(d.text, engine.tokenizer)) for k, d in docs.items()}
        extensions = extend_passages(engine, found, tokens, passages.extend_tokens)
        table_rows = [with_extension(r, e, passages.extend_tokens) for r, e in zip(table_rows, extensions, strict=True)]
    schema = passages_schema()
    meta = {**schema.metadata, FINGERPRINT_KEY: fingerprint(run, passages).encode(),
            b"extend_tokens": str(passages.extend_tokens).encode()}
    table = pa.Table.from_pylist(table_rows, schema=schema).replace_schema_metadata(meta)
    atomic_write(passages_path(run), lambda f: pq.write_table(table, f))
    log.info("%d passages from %d memorized spans written to %s", table.num_rows,
             sum(r["status"] == MEMORIZED for r in rows), passages_path(run))
    return table


def _needs_engine(run: RunDir, passages: PassageConfig) -> bool:
    if not passages.extend_tokens:
        return False
    status = run.read_results(columns=["status"]).column("status")
    return MEMORIZED in status.unique().to_pylist()


def ensure_passages(run: RunDir, config: ScanConfig, corpus: Corpus, passages: PassageConfig | None = None,
                    executor=None, engine=None) -> bool:
    """Build passages.parquet when every shard is done and the table is missing or stale; True when
    built. `engine`: one already loaded (the local executor's); else the model is loaded here, or in
    one Ray task when `executor` is Ray."""
    passages = passages or PassageConfig()
    if run.pending(run.load_plan()) or is_current(run, passages):
        return False
    if engine is not None or not _needs_engine(run, passages):
        write_passages(run, config, corpus, engine, passages)
    elif executor is not None and executor.kind == "ray":
        passages_on_ray(run, config, passages, executor)
    else:
        from scanner.run.shard import open_engine

        engine, _ = open_engine(config)
        try:
            write_passages(run, config, corpus, engine, passages)
        finally:
            engine.close()
    return True


def _ray_task(config: ScanConfig, out: str, passages: PassageConfig, cpus: float) -> int:
    """Inside Ray, with one scan actor's resources: load the engines, build the table, stop them."""
    if config.model.threads is None:  # as a scan actor does: torch would size its pool to the node
        import torch

        torch.set_num_threads(max(1, int(cpus)))
    from scanner.run.shard import open_engine
    from scanner.stages.read import open_corpus

    engine, _ = open_engine(config)
    try:
        return write_passages(RunDir(out), config, open_corpus(config.corpus), engine, passages).num_rows
    finally:
        engine.close()


def passages_on_ray(run: RunDir, config: ScanConfig, passages: PassageConfig, executor) -> int:
    """write_passages in one Ray task shaped like a scan actor (GPUs and CPUs per actor); it writes
    into the run directory on shared storage, as actors write shards."""
    from scanner.executors.ray import _init, cluster_shape, import_ray

    ray = import_ray()
    started = _init(ray, executor)
    try:
        _, gpus, cpus = cluster_shape(ray, executor)
        task = ray.remote(_ray_task).options(num_gpus=gpus, num_cpus=cpus, max_retries=executor.max_retries)
        rows = ray.get(task.remote(config, str(run.path.resolve()), passages, cpus))
        log.info("Ray: %d passages built in one task (%g GPU, %g CPU)", rows, gpus, cpus)
        return rows
    finally:
        if started:
            ray.shutdown()
