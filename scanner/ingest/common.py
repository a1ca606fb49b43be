"""What every reader shares: the ingest configuration, a document, and a skip with its reason.

Readers yield `Doc` (a row of the ingested corpus, less the per-file source columns the driver adds) or
`Skip` (why a file, a JSONL line or an EPUB item was left out). Nothing is dropped without a `Skip`:
the driver writes each one to the ingest log and counts it in the summary.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass, replace

from scanner.errors import InputError, require

STRIPS = ("gutenberg",)


@dataclass(frozen=True, kw_only=True)
class IngestConfig:
    sources: tuple[str, ...]
    out: str
    log: str | None = None  # None: <out without .parquet>.ingest-log.jsonl beside the output
    text_field: str = "text"  # JSONL
    id_field: str | None = None  # JSONL; None: '<relative path>:<line>'
    title_field: str | None = None  # JSONL
    author_field: str | None = None  # JSONL
    strip: tuple[str, ...] = ()
    encoding: str | None = None  # text files that are not UTF-8; None: detect

    def __post_init__(self) -> None:
        require(
            bool(self.sources),
            "no sources; pass folders, files or globs of .txt, .md, .epub, .jsonl, .jsonl.gz or .jsonl.zst",
        )
        require(
            isinstance(self.sources, tuple) and isinstance(self.strip, tuple),
            "sources and strip must be tuples",
        )
        require(bool(self.text_field), "--text-field is empty; pass the JSONL field that holds the text")
        unknown = [s for s in self.strip if s not in STRIPS]
        require(
            not unknown, f"--strip {unknown[0] if unknown else ''} is not known; choose from {list(STRIPS)}"
        )
        if self.encoding is not None:
            try:
                codecs.lookup(self.encoding)
            except LookupError as err:
                raise InputError(
                    f"--encoding {self.encoding!r} is not an encoding Python knows; pass a codec "
                    "name such as cp1252, latin-1 or utf-16"
                ) from err

    @property
    def log_path(self) -> str:
        if self.log is not None:
            return self.log
        stem = self.out[: -len(".parquet")] if self.out.endswith(".parquet") else self.out
        return f"{stem}.ingest-log.jsonl"


@dataclass(frozen=True, kw_only=True)
class Doc:
    """One document of the ingested corpus; columns as in scanner/schema.py's ingested_schema()."""

    doc_id: str
    text: str
    source_format: str
    title: str | None = None
    author: str | None = None
    language: str | None = None
    source_line: int | None = None
    encoding: str | None = None
    source_char_start: int | None = None
    sections: list[dict] | None = None
    meta: str | None = None

    def sliced(self, start: int, end: int) -> Doc:
        """The document trimmed to text[start:end]; offsets into the source and the sections follow."""
        sections = None
        if self.sections is not None:
            sections = [
                {
                    **s,
                    "char_start": max(s["char_start"], start) - start,
                    "char_end": min(s["char_end"], end) - start,
                }
                for s in self.sections
                if s["char_end"] > start and s["char_start"] < end
            ]
        offset = None if self.source_char_start is None else self.source_char_start + start
        return replace(self, text=self.text[start:end], source_char_start=offset, sections=sections)


@dataclass(frozen=True)
class Skip:
    """Something left out (status 'skipped'), a file of another type ('ignored') or a remark on a
    document that was kept ('note'). `kind` is the short reason counted in the summary."""

    kind: str
    reason: str
    line: int | None = None
    status: str = "skipped"


def one_line(err: BaseException, limit: int = 300) -> str:
    """An exception as one short line for the log: parsers put whole documents in their messages."""
    text = " ".join(f"{type(err).__name__}: {err}".split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
