"""The corpus `acr-scan ingest` writes, and what a corpus given to scan must hold."""

from __future__ import annotations

import pyarrow as pa

from scanner.schema.fields import DOC_KEY, field

INGESTED_VERSION = "1"

# What `stages/read.py` accepts. Documented here rather than enforced as a schema because the column
# names are options (--text-column, --id-column) and any other columns may be present.
CORPUS_REQUIRED = {
    "text": "The document text: a string column (string, large_string or string_view; null rows become "
    "skipped spans). Named by --text-column, default 'text'. Binary columns must be cast first.",
    "id": "Optional document id, string or integer, unique unless --allow-duplicate-ids. Named by "
    "--id-column; by default 'id', else 'doc_id', else '<file>:<row>' is used.",
}
TEXT_TYPES = (pa.string(), pa.large_string(), pa.string_view())


def _section_type() -> pa.DataType:
    entry = pa.struct(
        [
            field(
                "path",
                pa.string(),
                "The EPUB item (a spine document, usually a chapter) as its path "
                "inside the EPUB's zip archive, e.g. 'OEBPS/chapter02.xhtml'.",
            ),
            field(
                "char_start", pa.int64(), "Where the item's text starts in `text`, in characters, inclusive."
            ),
            field("char_end", pa.int64(), "Where the item's text ends in `text`, in characters, exclusive."),
        ]
    )
    return pa.list_(
        pa.field(
            "item",
            entry,
            nullable=False,
            metadata={DOC_KEY: b"One spine item and the character range its paragraphs fill in `text`."},
        )
    )


def _source_fields() -> list[pa.Field]:
    return [
        field("source_path", pa.string(), "The source file, as an absolute path at ingest time."),
        field(
            "source_format",
            pa.string(),
            "How the source was read: 'text' (.txt, .md), 'epub' or 'jsonl' (.jsonl, .jsonl.gz, .jsonl.zst).",
        ),
        field(
            "source_bytes", pa.int64(), "Size of the source file in bytes (compressed size for .gz / .zst)."
        ),
        field(
            "source_sha256",
            pa.string(),
            "sha256 of the source file's bytes, hex: which copy of the file this text came from.",
        ),
        field(
            "source_line",
            pa.int64(),
            "JSONL only: the 1-based line number of the document's record; null otherwise.",
            nullable=True,
        ),
        field(
            "encoding",
            pa.string(),
            "The encoding the text was decoded with: detected for text files "
            "(or --encoding), 'utf-8' for JSONL; null for EPUB (its XHTML declares its own).",
            nullable=True,
        ),
        field(
            "source_char_start",
            pa.int64(),
            "Where `text` starts in the source text, in characters: "
            "a text file decoded with `encoding` and universal newlines (what Python's "
            "open(source_path, encoding=encoding).read() returns), or the JSONL record's text field. "
            "source_text[source_char_start + i] == text[i]; nonzero when --strip removed a header. "
            "Null for EPUB (see `sections`).",
            nullable=True,
        ),
        field(
            "sections",
            _section_type(),
            "EPUB only: the spine items in reading order with the "
            "character range of `text` each one fills (items are joined by a blank line); null "
            "otherwise.",
            nullable=True,
        ),
    ]


def ingested_schema() -> pa.Schema:
    """What `acr-scan ingest` writes. Column names are a public interface: add columns, never rename."""
    fields = [
        field(
            "doc_id",
            pa.string(),
            "Document id, unique in the corpus: the source file's path relative "
            "to the common folder of all ingested files (POSIX separators); for JSONL the --id-field "
            "value, or '<relative path>:<line>'.",
        ),
        field(
            "title",
            pa.string(),
            "Title: EPUB metadata (dc:title), a Project Gutenberg 'Title:' "
            "header line, or the JSONL --title-field; null when the source has none.",
            nullable=True,
        ),
        field(
            "author",
            pa.string(),
            "Author(s), '; '-joined: EPUB metadata (dc:creator), a Project "
            "Gutenberg 'Author:' header line, or the JSONL --author-field; null when none.",
            nullable=True,
        ),
        field("language", pa.string(), "EPUB metadata (dc:language); null otherwise.", nullable=True),
        *_source_fields(),
        field(
            "meta",
            pa.string(),
            "JSONL only: the record's other fields as a JSON object (pass "
            "--keep-columns meta to scan to carry it into the results); null otherwise.",
            nullable=True,
        ),
        field(
            "text",
            pa.string(),
            "The document text that scan windows: a text file's decoded content "
            "(newlines normalized to \\n), an EPUB's paragraphs one per line in spine order, or the "
            "JSONL text field; trimmed to the book by --strip gutenberg.",
        ),
    ]
    return pa.schema(
        fields, metadata={b"name": b"acr-scanner ingested corpus", b"version": INGESTED_VERSION.encode()}
    )
