"""A seeded random sample of a corpus's documents, written as a Parquet corpus of its own (`acr-scan
plan` scans it to project the whole scan). The same corpus, size and seed give the same rows; the
sample keeps the columns the scan reads and, where the corpus has no id column, the rows' own
'<file>:<row>' names as `id`, so the sample's results still point into the corpus."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from scanner.errors import InputError
from scanner.stages.read import Corpus
from scanner.storage.atomic import atomic_write, atomic_write_json

SAMPLE_FILE = "sample.parquet"
RECORD_FILE = "sample.json"


def sample_rows(documents: int, size: int, seed: int) -> list[int]:
    """`size` distinct row indices of `documents`, in corpus order (so shards read forward)."""
    return sorted(random.Random(seed).sample(range(documents), size))


def _row_names(corpus: Corpus, rows: list[int]) -> list[str]:
    names, offset, wanted = [], 0, iter(rows)
    row = next(wanted, None)
    for name, file in zip(corpus.names, corpus.files, strict=True):
        end = offset + pq.ParquetFile(file).metadata.num_rows
        while row is not None and row < end:
            names.append(f"{name}:{row - offset}")
            row = next(wanted, None)
        offset = end
    return names


def write_sample(corpus: Corpus, size: int, seed: int, folder: str | Path) -> Path:
    """folder/sample.parquet with `size` documents drawn with `seed`, and folder/sample.json recording
    the draw. An existing sample of another draw is refused: its run would mix two samples."""
    folder = Path(folder)
    record = {"corpus": corpus.fingerprint(), "documents": corpus.num_rows, "size": size, "seed": seed}
    path, kept = folder / SAMPLE_FILE, folder / RECORD_FILE
    if kept.is_file():
        before = json.loads(kept.read_text())
        if {k: before.get(k) for k in record} != record:
            raise InputError(
                f"{folder} holds the plan of another screen sample ({before.get('size')} of "
                f"{before.get('documents')} documents, seed {before.get('seed')}, corpus "
                f"{str(before.get('corpus'))[:12]}); this one asks {size} of {corpus.num_rows} "
                f"documents, seed {seed}, corpus {record['corpus'][:12]}: give another --out, or "
                "the same corpus, --screen-sample and --seed to resume it"
            )
        if path.is_file():
            return path
    folder.mkdir(parents=True, exist_ok=True)
    rows = sample_rows(corpus.num_rows, size, seed)
    table = corpus.take(rows)
    if corpus.id_column is None:
        table = table.append_column("id", pa.array(_row_names(corpus, rows), pa.string()))
    atomic_write(path, lambda f: pq.write_table(table, f))
    atomic_write_json(kept, {**record, "rows": rows})
    return path
