"""Phase 4's work: RUN/passages.parquet, the memorized passages of a finished scan.

`write_passages` builds the table (merge: scanner/measures/passages.py; extension: stages/extend.py) on
an engine the caller owns: a worker's (run/tasks.py PassagesTask, on whichever executor) or none when
nothing is to be extended. When it must run is the phases' decision (run/phases.py); the table's
fingerprint and reading it are storage's (storage/passages.py).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from scanner.config import PassageConfig
from scanner.errors import require
from scanner.measures.passages import MEMORIZED, find_passages, passage_rows, with_extension
from scanner.schema import passages_schema
from scanner.stages.extend import DocumentTokens, extend_passages
from scanner.stages.spans import tokenize_document
from scanner.storage.atomic import atomic_write
from scanner.storage.passages import FINGERPRINT_KEY, fingerprint, passages_path
from scanner.storage.rundir import RunDir

if TYPE_CHECKING:  # the engine (torch) loads only where a table is built, never for export or report
    from scanner.config import ScanConfig
    from scanner.stages.read import Corpus, Document

log = logging.getLogger(__name__)

SHARED_KEY = b"shared_text_min_docs"  # the passages table's metadata: the threshold its shared_text used

# What the merge and the extension read from the results.
READ = (
    "doc_id",
    "doc_row",
    "span_id",
    "char_start",
    "char_end",
    "token_start",
    "token_end",
    "text",
    "target_tokens",
    "status",
    "acr",
    "prompt",
    "prompt_tokens",
    "certificate_prompt",
    "shard",
    "acr_kind",
    "calibrated_memorized",
    "prompt_source",
    "copies_in_corpus",
)


def _results(run: RunDir) -> tuple[list[dict], dict]:
    """The rows of the documents holding a memorized span (a passage counts its document's other rows),
    read shard by shard: a library's millions of other rows stay on disk."""
    memorized = run.read_results(columns=["doc_id", "doc_row"], where=pc.field("status") == MEMORIZED)
    holding = pc.field("doc_row").isin(pc.unique(memorized.column("doc_row")).drop_null()) | pc.field(
        "doc_id"
    ).isin(pc.unique(memorized.column("doc_id")))
    table = run.read_results(columns=list(READ), where=holding)
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


def write_passages(
    run: RunDir, config: ScanConfig, corpus: Corpus, engine=None, passages: PassageConfig | None = None
) -> pa.Table:
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
        tokens = {
            k: DocumentTokens(d.text, *tokenize_document(d.text, engine.tokenizer)) for k, d in docs.items()
        }
        extensions = extend_passages(engine, found, tokens, passages.extend_tokens)
        table_rows = [
            with_extension(r, e, passages.extend_tokens) for r, e in zip(table_rows, extensions, strict=True)
        ]
    shared = passages.shared_min_docs(run.load_plan().num_docs)
    table_rows = [
        {**r, "shared_text": None if r["copies_in_corpus"] is None else r["copies_in_corpus"] >= shared}
        for r in table_rows
    ]
    schema = passages_schema()
    meta = {
        **schema.metadata,
        FINGERPRINT_KEY: fingerprint(run, passages).encode(),
        b"extend_tokens": str(passages.extend_tokens).encode(),
        SHARED_KEY: str(shared).encode(),
    }
    table = pa.Table.from_pylist(table_rows, schema=schema).replace_schema_metadata(meta)
    atomic_write(passages_path(run), lambda f: pq.write_table(table, f))
    log.info(
        "%d passages from %d memorized spans written to %s",
        table.num_rows,
        sum(r["status"] == MEMORIZED for r in rows),
        passages_path(run),
    )
    return table


def needs_engine(run: RunDir, passages: PassageConfig) -> bool:
    """Whether building the table needs the model: only to extend memorized passages."""
    if not passages.extend_tokens:
        return False
    status = run.read_results(columns=["status"]).column("status")
    return MEMORIZED in status.unique().to_pylist()
