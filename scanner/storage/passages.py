"""RUN/passages.parquet as stored: its path, its fingerprint and reading it (export, report).

The table records a fingerprint of the results (every done marker's checksum) and of the passage
settings, so a relaunch rebuilds it only when it is missing or stale: a shard recomputed, or another
--extend-tokens. Building it is run/passages.py's.
"""

from __future__ import annotations

import hashlib
import json

import pyarrow as pa
import pyarrow.parquet as pq

from scanner.config import PassageConfig
from scanner.errors import require
from scanner.schema import PASSAGES_VERSION
from scanner.storage.integrity import read_json_object
from scanner.storage.rundir import RunDir

PASSAGES_FILE = "passages.parquet"
FINGERPRINT_KEY = b"results_fingerprint"


def passages_path(run: RunDir):
    return run.path / PASSAGES_FILE


def fingerprint(run: RunDir, passages: PassageConfig) -> str:
    """sha256 over every done marker (shard, rows, results checksum) and the passage settings."""
    markers = [read_json_object(run.done_path(shard)) or {"shard": shard} for shard in run.done_shards()]
    blob = json.dumps(
        {
            "markers": markers,
            "extend_tokens": passages.extend_tokens,
            "version": PASSAGES_VERSION,
            "shared_text_min_docs": passages.shared_text_min_docs,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def is_current(run: RunDir, passages: PassageConfig) -> bool:
    path = passages_path(run)
    try:
        metadata = pq.read_schema(path).metadata or {}
    except (OSError, pa.ArrowException):
        return False  # missing or damaged: build it again
    return metadata.get(FINGERPRINT_KEY) == fingerprint(run, passages).encode()


def passages_if_built(run: RunDir) -> pa.Table | None:
    """The run's passages table, or None where it has none yet (an unfinished scan)."""
    path = passages_path(run)
    return pq.read_table(path) if path.is_file() else None


def read_passages(run: RunDir) -> pa.Table:
    """The run's passages table (export, report); InputError naming the fix when there is none."""
    path = passages_path(run)
    require(
        path.is_file(),
        f"'{run.path}' has no {PASSAGES_FILE} (the scan is unfinished, or the file was "
        "deleted); relaunch the same scan command: finished shards are kept and only the "
        "passages are built",
    )
    return pq.read_table(path)
