"""The ingest driver: sources -> readers -> one Parquet corpus (atomic) and an ingest log.

Files are read one at a time and written in row groups as they come, so a collection larger than
memory ingests in one pass. The output is written to a temp file and renamed into place; the log (one
JSON object per skipped, ignored or noted thing) is written whatever happens, so a failed ingest still
says why. Ingesting the same files with the same options gives the same bytes, hence the same corpus
fingerprint for `scan`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from scanner import __version__
from scanner.errors import InputError, require
from scanner.ingest.common import Doc, IngestConfig, Skip, one_line
from scanner.ingest.epub import read_epub
from scanner.ingest.jsonl import read_jsonl
from scanner.ingest.sources import file_format, relative_names, resolve_sources
from scanner.ingest.text import read_text_file, strip_gutenberg
from scanner.schema import ingested_schema
from scanner.storage.atomic import atomic_write, atomic_write_bytes

log = logging.getLogger(__name__)

READERS = {"text": read_text_file, "epub": read_epub, "jsonl": read_jsonl}
# A row group is what scan reads to fetch one shard's documents: bounded in rows and in text.
GROUP_ROWS = 256
GROUP_CHARS = 32 << 20


@dataclass
class IngestSummary:
    out: str
    log: str
    documents: Counter = field(default_factory=Counter)  # by source format
    characters: int = 0
    skipped: Counter = field(default_factory=Counter)  # by kind
    ignored: int = 0
    notes: Counter = field(default_factory=Counter)

    def problems(self) -> str:
        def counts(c: Counter) -> str:
            return ", ".join(f"{k} {v}" for k, v in sorted(c.items()))

        parts = [f"skipped {sum(self.skipped.values())} ({counts(self.skipped)})"] if self.skipped else []
        parts += [f"ignored {self.ignored} file(s) of other types"] if self.ignored else []
        parts += [f"notes: {counts(self.notes)}"] if self.notes else []
        return "; ".join(parts) or "nothing skipped"

    def line(self) -> str:
        formats = ", ".join(f"{k} {v}" for k, v in sorted(self.documents.items()))
        count = sum(self.documents.values())
        return (
            f"ingested {count} document{'' if count == 1 else 's'} ({formats}; {self.characters:,} "
            f"characters) into {self.out}; {self.problems()}; log: {self.log}"
        )


def _check_paths(config: IngestConfig) -> tuple[Path, Path]:
    out, log_path = Path(config.out), Path(config.log_path)
    require(
        not out.is_dir(),
        f"--out '{config.out}' is a folder; pass a file path such as {out / 'corpus.parquet'}",
    )
    require(
        out.name.lower().endswith(".parquet"),
        f"--out '{config.out}' must name a .parquet file, e.g. --out corpus.parquet",
    )
    require(log_path.resolve() != out.resolve(), f"--log '{log_path}' is the output file; pass another path")
    for path, option in ((out, "--out"), (log_path, "--log")):
        parent = path.parent if str(path.parent) else Path(".")
        require(parent.is_dir(), f"{option} '{path}': the folder '{parent}' does not exist; create it first")
        require(
            os.access(parent, os.W_OK),
            f"{option} '{path}': the folder '{parent}' is not writable; "
            "pass a path in a folder you can write to",
        )
    return out, log_path


def _source_columns(path: Path) -> dict:
    with open(path, "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    return {"source_path": str(path), "source_bytes": path.stat().st_size, "source_sha256": digest}


class _Ingestion:
    """The state of one ingest: the log entries, the counts and the ids taken so far."""

    def __init__(self, config: IngestConfig, summary: IngestSummary) -> None:
        self.config = config
        self.summary = summary
        self.entries: list[dict] = []
        self.taken: dict[str, str] = {}  # doc_id -> where it came from

    def record(self, path: Path, item: Skip) -> None:
        self.entries.append(
            {
                "source": str(path),
                "line": item.line,
                "status": item.status,
                "kind": item.kind,
                "reason": item.reason,
            }
        )
        counter = {"skipped": self.summary.skipped, "note": self.summary.notes}.get(item.status)
        if counter is None:
            self.summary.ignored += 1
        else:
            counter[item.kind] += 1
        if item.status == "skipped":
            log.info("skipped %s%s: %s", path, f" line {item.line}" if item.line else "", item.reason)

    def rows(self, files: list[Path]) -> Iterator[dict]:
        for path, name in zip(files, relative_names(files) if files else [], strict=True):
            yield from self._file(path, name)

    def _file(self, path: Path, name: str) -> Iterator[dict]:
        try:
            columns = _source_columns(path)
        except OSError as err:
            self.record(path, Skip("unreadable", one_line(err)))
            return
        produced = False
        for item in READERS[file_format(path)](path, name, self.config):
            produced = True
            doc = self._accept(path, item)
            if doc is not None:
                yield {**columns, **asdict(doc)}
        if not produced:
            self.record(path, Skip("empty", "the file holds no records"))

    def _accept(self, path: Path, item: Doc | Skip) -> Doc | None:
        if isinstance(item, Skip):
            self.record(path, item)
            return None
        if "gutenberg" in self.config.strip:
            item, remark = strip_gutenberg(item)
            if remark is not None:
                self.record(path, replace(remark, line=item.source_line))
        where = f"{path}" + (f" line {item.source_line}" if item.source_line else "")
        if item.doc_id in self.taken:
            self.record(
                path,
                Skip(
                    "duplicate id",
                    f"doc_id '{item.doc_id}' is already taken by {self.taken[item.doc_id]}",
                    item.source_line,
                ),
            )
            return None
        self.taken[item.doc_id] = where
        self.summary.documents[item.source_format] += 1
        self.summary.characters += len(item.text)
        return item


def _groups(rows: Iterator[dict]) -> Iterator[list[dict]]:
    group, chars = [], 0
    for row in rows:
        group.append(row)
        chars += len(row["text"])
        if len(group) >= GROUP_ROWS or chars >= GROUP_CHARS:
            yield group
            group, chars = [], 0
    if group:
        yield group


def _schema(config: IngestConfig) -> pa.Schema:
    # Options, not paths or times: the same files ingested again give the same bytes.
    options = {
        "package_version": __version__,
        "text_field": config.text_field,
        "id_field": config.id_field,
        "title_field": config.title_field,
        "author_field": config.author_field,
        "strip": list(config.strip),
        "encoding": config.encoding,
    }
    schema = ingested_schema()
    return schema.with_metadata({**schema.metadata, b"ingest": json.dumps(options, sort_keys=True).encode()})


class _NothingIngested(Exception):
    pass


def _write(f, rows: Iterator[dict], schema: pa.Schema) -> None:
    written = 0
    with pq.ParquetWriter(f, schema) as writer:
        for group in _groups(rows):
            writer.write_table(pa.Table.from_pylist(group, schema=schema))
            written += len(group)
    if not written:
        raise _NothingIngested  # atomic_write removes the temp file; no empty corpus is left behind


def ingest(config: IngestConfig) -> IngestSummary:
    """Read every source into config.out; the summary counts documents, skips, ignored files and notes."""
    out, log_path = _check_paths(config)
    files, ignored = resolve_sources(config.sources, exclude={out.resolve(), log_path.resolve()})
    summary = IngestSummary(out=str(out), log=str(log_path))
    state = _Ingestion(config, summary)
    for path, item in ignored:
        state.record(path, item)
    try:
        atomic_write(out, lambda f: _write(f, state.rows(files), _schema(config)))
    except _NothingIngested:
        raise InputError(
            f"nothing could be ingested from {', '.join(config.sources)}: {len(files)} "
            f"file(s) of a known type, {summary.problems()}; each reason is in {log_path}"
        ) from None
    finally:
        lines = "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in state.entries)
        atomic_write_bytes(log_path, lines.encode())
    log.info("%s", summary.line())
    return summary
