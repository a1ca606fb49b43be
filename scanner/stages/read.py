"""Read stage: open a Parquet corpus, validate it before any model loads, and yield documents.

Every check that a user can fix (wrong path, wrong column, binary text, duplicate ids, no rows) runs
in `open_corpus`, reading only file footers and the id column, so a bad corpus fails in seconds and
not after a model has loaded on a GPU cluster.
"""

from __future__ import annotations

import bisect
import glob
import hashlib
import itertools
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from scanner.config import EXPECTED, CorpusConfig
from scanner.errors import InputError, require
from scanner.schema import TEXT_TYPES

log = logging.getLogger(__name__)

AUTO_ID_COLUMNS = ("id", "doc_id")
PARQUET_MAGIC = b"PAR1"
SHOWN_DUPLICATES = 5
ID_BATCH_ROWS = 1 << 20
UTF8_FIX = "the row is skipped; re-encode the text as UTF-8 and rewrite the file to scan it"


@dataclass(frozen=True)
class Document:
    doc_id: str
    text: str | None
    extra: dict = field(default_factory=dict)
    # Where the row stands: '<file>:<row>' (file relative to the corpus's common folder). Unique per
    # corpus row even when ids repeat (--allow-duplicate-ids), so it, not doc_id, keys a span.
    row: str = ""
    # Why the row cannot be scanned (e.g. text that is not valid UTF-8), naming file, row group and row;
    # the spans stage turns it into one skipped span, so the rest of the corpus still scans.
    problem: str | None = None


def _has_glob(path: str) -> bool:
    return any(ch in path for ch in "*?[")


def _visible(path: Path, root: Path) -> bool:
    # Spark and pyarrow write _SUCCESS / _metadata and hidden temp files beside the data; skip them
    # like pyarrow.dataset does.
    return not any(part.startswith((".", "_")) for part in path.relative_to(root).parts)


def _resolve_files(path: str) -> list[str]:
    if _has_glob(path):
        files = sorted(p for p in glob.glob(path, recursive=True) if os.path.isfile(p))
        require(bool(files), f"no files match the corpus glob '{path}'; expected {EXPECTED}")
        return files
    target = Path(path)
    require(target.exists(), f"corpus path '{path}' does not exist; expected {EXPECTED}")
    if target.is_file():
        return [str(target)]
    # The extension in any case: `.PARQUET` files written on another system are data too.
    files = sorted(
        str(p)
        for p in target.rglob("*")
        if p.suffix.lower() == ".parquet" and p.is_file() and _visible(p, target)
    )
    require(
        bool(files),
        f"no Parquet files (*.parquet) under directory '{path}'; expected {EXPECTED}; "
        "for text files, EPUB or JSONL run `acr-scan ingest` first",
    )
    return files


def _check_parquet(file: str) -> None:
    """Parquet files start and end with the magic bytes PAR1; anything else is a different format."""
    size = os.path.getsize(file)
    with open(file, "rb") as f:
        head = f.read(4)
        f.seek(max(size - 4, 0))
        tail = f.read(4)
    require(
        size >= 12 and head == PARQUET_MAGIC and tail == PARQUET_MAGIC,
        f"'{file}' is not a Parquet file (no PAR1 magic bytes); the corpus must be {EXPECTED}. "
        "Turn text files, EPUB or JSONL into one with `acr-scan ingest SRC --out corpus.parquet`",
    )


def _check_footer(file: str) -> None:
    """The footer parses and every column chunk lies inside the file: a file cut short or damaged
    behind intact magic bytes fails here, named, before any model loads."""
    fix = "restore it from its source or a backup, or move it out of the corpus"
    try:
        metadata = pq.read_metadata(file)
    except (OSError, pa.ArrowException) as err:
        raise InputError(f"'{file}' has a corrupt Parquet footer ({_first_line(err)}); {fix}") from err
    size = os.path.getsize(file)
    for group in range(metadata.num_row_groups):
        row_group = metadata.row_group(group)
        for index in range(row_group.num_columns):
            chunk = row_group.column(index)
            start = min(o for o in (chunk.dictionary_page_offset, chunk.data_page_offset) if o is not None)
            require(
                0 <= start and start + chunk.total_compressed_size <= size,
                f"'{file}' row group {group}: the footer places column '{chunk.path_in_schema}' at bytes "
                f"{start}..{start + chunk.total_compressed_size}, past the end of the {size}-byte file "
                f"(cut short or corrupt); {fix}",
            )


def _first_line(err: Exception) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__


def _is_text(type_: pa.DataType) -> bool:
    if pa.types.is_dictionary(type_):
        return _is_text(type_.value_type)
    return type_ in TEXT_TYPES or pa.types.is_null(type_)


def _is_id(type_: pa.DataType) -> bool:
    if pa.types.is_dictionary(type_):
        return _is_id(type_.value_type)
    return type_ in TEXT_TYPES or pa.types.is_integer(type_)


def _pick_id_column(config: CorpusConfig, names: list[str]) -> str | None:
    if config.id_column is not None:
        return config.id_column
    return next((name for name in AUTO_ID_COLUMNS if name in names), None)


def _check_columns(file: str, schema: pa.Schema, config: CorpusConfig, id_column: str | None) -> None:
    names = schema.names
    wanted = [
        (config.text_column, "pass --text-column with one of them"),
        (id_column, "pass --id-column with one of them"),
    ]
    wanted += [
        (name, f"drop '{name}' from --keep-columns or name one of them there") for name in config.keep_columns
    ]
    for name, fix in wanted:
        require(
            name is None or name in names,
            f"column '{name}' not found in '{file}'; columns are [{', '.join(names)}]; {fix}",
        )
    text_type = schema.field(config.text_column).type
    require(
        _is_text(text_type),
        f"text column '{config.text_column}' in '{file}' has type {text_type}, "
        "not a string type; cast it to string (pyarrow.compute.cast(column, pa.string())) and rewrite "
        "the file, or pass --text-column with a string column",
    )
    if id_column is not None:
        id_type = schema.field(id_column).type
        require(
            _is_id(id_type),
            f"id column '{id_column}' in '{file}' has type {id_type}; expected a "
            "string or integer column; pass --id-column with another column or cast it to string",
        )


def _relative_names(files: list[str]) -> list[str]:
    root = os.path.commonpath([os.path.dirname(os.path.abspath(f)) for f in files])
    return [Path(os.path.relpath(os.path.abspath(f), root)).as_posix() for f in files]


def _footer_digest(file: str) -> str:
    """sha256 of the Parquet footer: row groups, sizes, statistics and schema, without reading data."""
    with open(file, "rb") as f:
        f.seek(-8, os.SEEK_END)
        length = int.from_bytes(f.read(4), "little")
        f.seek(-(8 + length), os.SEEK_END)
        return hashlib.sha256(f.read(length)).hexdigest()


def _as_string(column: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    # Integer ids become their decimal strings, so doc_id is a string everywhere downstream.
    return column if column.type == pa.string() else pc.cast(column, pa.string())


def _id_values(file: str, id_column: str) -> pa.ChunkedArray:
    parquet = pq.ParquetFile(file)
    chunks = [
        batch.column(0)
        for group in range(parquet.num_row_groups)
        for batch in _group_batches(parquet, file, group, [id_column], ID_BATCH_ROWS)
    ]
    return pa.chunked_array(chunks, parquet.schema_arrow.field(id_column).type)


def _check_ids(files: list[str], id_column: str, allow: bool) -> None:
    chunks = []
    for file in files:
        ids = _as_string(_id_values(file, id_column))
        require(
            ids.null_count == 0,
            f"id column '{id_column}' has {ids.null_count} null values in "
            f"'{file}'; fill them, or pass --id-column with a complete column",
        )
        _check_utf8_ids(ids, file, id_column)
        chunks.extend(ids.chunks)
    if allow or not chunks:
        return
    counts = pc.value_counts(pa.chunked_array(chunks, pa.string()))
    repeated = counts.filter(pc.greater(counts.field("counts"), 1))
    if len(repeated):
        first = repeated.slice(0, SHOWN_DUPLICATES)
        pairs = zip(first.field("values").to_pylist(), first.field("counts").to_pylist(), strict=True)
        shown = ", ".join(f"'{value}' ({count}x)" for value, count in pairs)
        raise InputError(
            f"id column '{id_column}' has {len(repeated)} duplicated ids, first: {shown}; "
            "make the ids unique, pass --id-column with a unique column, or pass "
            "--allow-duplicate-ids"
        )


def _check_utf8_ids(ids: pa.ChunkedArray, file: str, id_column: str) -> None:
    """Ids are every row's name in the results: one that is not UTF-8 stops the scan here, named."""
    try:
        for chunk in ids.chunks:
            chunk.validate(full=True)
        return
    except pa.ArrowInvalid:
        pass
    _, bad = _decoded(ids)
    row, why = next(iter(bad.items()))
    groups = pq.ParquetFile(file).metadata
    ends = list(itertools.accumulate(groups.row_group(g).num_rows for g in range(groups.num_row_groups)))
    raise InputError(
        f"id column '{id_column}' in {_where(file, bisect.bisect_right(ends, row), row)} {why}, "
        f"{len(bad)} such id(s) in the file; "
        "re-encode the ids as UTF-8 and rewrite the file, or pass --id-column with another column"
    )


class Corpus:
    """A validated corpus. Holds file paths and a pyarrow dataset (cheap: footers only), no data."""

    def __init__(
        self,
        config: CorpusConfig,
        files: list[str],
        dataset: ds.Dataset,
        id_column: str | None,
        num_rows: int,
    ) -> None:
        self.config = config
        self.files = files
        self.names = _relative_names(files)
        self.id_column = id_column
        self.num_rows = num_rows
        self._dataset = dataset
        self.columns = list(
            dict.fromkeys([config.text_column, *([id_column] if id_column else []), *config.keep_columns])
        )

    def fingerprint(self) -> str:
        """A stable hash of the file names (relative to their common folder), sizes, Parquet footers
        and the schema. Moving the corpus keeps it; rewriting a file changes it. Data pages are not
        hashed (terabytes at every resume): an edit that keeps every size and footer goes unnoticed."""
        files = [
            [name, os.path.getsize(file), _footer_digest(file)]
            for name, file in zip(self.names, self.files, strict=True)
        ]
        schema = hashlib.sha256(self._dataset.schema.serialize().to_pybytes()).hexdigest()
        blob = json.dumps({"files": files, "schema": schema}, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()

    def take(self, rows: list[int]) -> pa.Table:
        """The corpus rows at these global indices (as iter_documents numbers them), the scan's columns
        only, their types kept: a sample corpus that reads like this one."""
        return self._dataset.take(pa.array(rows, pa.int64()), columns=self.columns)

    def text_bytes(self) -> int:
        """UTF-8 bytes of the text column over the whole corpus: one column read, no decoding, so a
        projection can scale by text size without tokenizing every document."""
        total = 0
        for batch in self._dataset.to_batches(columns=[self.config.text_column]):
            total += pc.sum(pc.binary_length(batch.column(0))).as_py() or 0
        return total

    def iter_documents(self, batch_rows: int = 1024) -> Iterator[Document]:
        """Documents in file order, then row order; only the needed columns are read."""
        require(batch_rows >= 1, f"batch_rows {batch_rows} must be >= 1")
        for name, file in zip(self.names, self.files, strict=True):
            parquet = pq.ParquetFile(file)
            row = 0
            for group in range(parquet.num_row_groups):
                for batch in _group_batches(parquet, name, group, self.columns, batch_rows):
                    yield from self._documents(batch, name, group, row)
                    row += batch.num_rows

    def documents(self, start: int, end: int) -> list[Document]:
        """Documents [start, end) by global index, as iter_documents numbers them. Reads only the row
        groups that hold them, so a worker fetches its shard without scanning the corpus before it."""
        require(
            0 <= start <= end <= self.num_rows,
            f"document range [{start}, {end}) is outside the "
            f"corpus of {self.num_rows} documents; the run directory's plan does not fit this corpus",
        )
        docs: list[Document] = []
        offset = 0
        for name, file in zip(self.names, self.files, strict=True):
            parquet = pq.ParquetFile(file)
            rows = parquet.metadata.num_rows
            if offset < end and start < offset + rows:
                docs += self._file_range(parquet, name, max(start - offset, 0), min(end - offset, rows))
            offset += rows
        return docs

    def _file_range(self, parquet: pq.ParquetFile, name: str, lo: int, hi: int) -> list[Document]:
        docs: list[Document] = []
        first = 0
        for group in range(parquet.num_row_groups):
            rows = parquet.metadata.row_group(group).num_rows
            if first < hi and lo < first + rows:
                a, b = max(lo - first, 0), min(hi - first, rows)
                batches = list(_group_batches(parquet, name, group, self.columns, rows))
                table = pa.Table.from_batches(batches).slice(a, b - a)
                docs += self._documents(table, name, group, first + a)
            first += rows
        return docs

    def _documents(
        self, batch: pa.RecordBatch | pa.Table, name: str, group: int, first_row: int
    ) -> Iterator[Document]:
        if self.id_column is None:
            ids = [f"{name}:{first_row + i}" for i in range(batch.num_rows)]
        else:
            ids = _as_string(batch.column(self.id_column)).to_pylist()  # valid UTF-8: checked at open
        problems: dict[int, str] = {}
        values = {}
        for column in (self.config.text_column, *self.config.keep_columns):
            values[column], bad = _decoded(batch.column(column))
            for i, why in bad.items():
                problems.setdefault(i, f"column '{column}' {why}")
        texts = values[self.config.text_column]
        extras = {column: values[column] for column in self.config.keep_columns}
        for i, (doc_id, text) in enumerate(zip(ids, texts, strict=True)):
            problem = None
            if i in problems:
                problem = f"{_where(name, group, first_row + i)}: {problems[i]}; {UTF8_FIX}"
            yield Document(
                doc_id=doc_id,
                text=text,
                extra={k: v[i] for k, v in extras.items()},
                problem=problem,
                row=f"{name}:{first_row + i}",
            )


def _where(name: str, group: int, row: int) -> str:
    return f"'{name}' row group {group}, row {row} (0-based, counted in the file)"


def _group_batches(
    parquet: pq.ParquetFile, name: str, group: int, columns: list[str], batch_rows: int
) -> Iterator[pa.RecordBatch]:
    """One row group's batches; a damaged page is named by file and row group, not left to the reader."""
    try:
        yield from parquet.iter_batches(batch_size=batch_rows, row_groups=[group], columns=columns)
    except (OSError, pa.ArrowException) as err:
        raise InputError(
            f"'{name}' row group {group} cannot be read ({_first_line(err)}): the file is "
            "damaged (a corrupt data page) or unreadable; restore the file from its source or a "
            "backup and relaunch the same command (finished shards are kept)"
        ) from err


def _binary(chunk: pa.Array) -> pa.Array:
    if pa.types.is_dictionary(chunk.type):
        chunk = chunk.dictionary_decode()
    if chunk.type == pa.large_string():
        return chunk.view(pa.large_binary())
    return chunk.cast(pa.binary_view()) if chunk.type == pa.string_view() else chunk.view(pa.binary())


def _decoded(column: pa.Array | pa.ChunkedArray) -> tuple[list, dict[int, str]]:
    """The column's Python values, and {position: why} for string values that are not valid UTF-8
    (they become None). Valid batches take the fast path; only a failing batch is decoded per value."""
    try:
        return column.to_pylist(), {}
    except UnicodeDecodeError:
        pass
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    values, bad = [], {}
    for raw in (value for chunk in chunks for value in _binary(chunk).to_pylist()):
        try:
            values.append(None if raw is None else raw.decode("utf-8"))
        except UnicodeDecodeError as err:
            bad[len(values)] = f"is not valid UTF-8 (byte 0x{raw[err.start]:02x} at byte {err.start})"
            values.append(None)
    return values, bad


def open_corpus(config: CorpusConfig) -> Corpus:
    """Resolve, open and validate the corpus; raise InputError naming the fix for anything wrong."""
    files = _resolve_files(config.path)
    for file in files:
        _check_parquet(file)
        _check_footer(file)
    dataset = ds.dataset(files, format="parquet")
    fragments = list(dataset.get_fragments())
    id_column = _pick_id_column(config, dataset.schema.names)
    # Every file, not only the first: a later file without the text column would fail mid-run.
    for fragment, file in zip(fragments, files, strict=True):
        _check_columns(file, fragment.physical_schema, config, id_column)
    num_rows = dataset.count_rows()
    require(
        num_rows > 0,
        f"corpus '{config.path}' has no rows ({len(files)} file(s), all empty); "
        "point the corpus at files that hold documents",
    )
    if id_column is not None:
        _check_ids(files, id_column, config.allow_duplicate_ids)
    log.info(
        "corpus %s: %d file(s), %d documents, id column %s",
        config.path,
        len(files),
        num_rows,
        id_column or "<file>:<row>",
    )
    return Corpus(config, files, dataset, id_column, num_rows)
