"""JSONL dumps (plain, gzip or zstd): one document per line, the text from a field named by --text-field.

Lines are read as bytes and decoded one by one, so one bad line is one Skip, not a lost file. A
compressed stream that breaks off keeps the documents read before the break and logs the rest as lost.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import zlib
from collections.abc import Iterator
from pathlib import Path

from scanner.ingest.common import Doc, IngestConfig, Skip, one_line


@contextlib.contextmanager
def open_lines(path: Path) -> Iterator[io.BufferedReader]:
    """The file's decompressed bytes, line by line."""
    name = path.name.lower()
    with contextlib.ExitStack() as stack:
        raw = stack.enter_context(open(path, "rb"))
        if name.endswith(".gz"):
            yield stack.enter_context(gzip.GzipFile(fileobj=raw))
        elif name.endswith(".zst"):
            import zstandard

            reader = stack.enter_context(zstandard.ZstdDecompressor().stream_reader(raw))
            yield stack.enter_context(io.BufferedReader(reader))
        else:
            yield raw


def _read_errors() -> tuple[type[BaseException], ...]:
    import zstandard

    return (OSError, EOFError, zlib.error, zstandard.ZstdError)


def _fields(record: dict, config: IngestConfig, number: int) -> dict | Skip:
    """text, doc_id, title and author from the fields the options name; a Skip when one is unusable."""
    names = {
        "text": config.text_field,
        "doc_id": config.id_field,
        "title": config.title_field,
        "author": config.author_field,
    }
    values = {}
    for key, name in names.items():
        value = record.get(name) if name else None
        if key == "doc_id" and isinstance(value, int) and not isinstance(value, bool):
            value = str(value)  # integer ids are common in dumps; doc_id is a string everywhere
        if value is not None and not isinstance(value, str):
            return Skip("missing field", f"field '{name}' is a {type(value).__name__}, not a string", number)
        if name and key in ("text", "doc_id") and value in (None, ""):
            return Skip(
                "missing field",
                f"no '{name}' field (or it is empty); fields are {sorted(record)[:10]}",
                number,
            )
        values[key] = value
    if not values["text"].strip():
        return Skip("empty", f"field '{config.text_field}' holds only whitespace", number)
    return values


def _document(line: bytes, number: int, name: str, config: IngestConfig) -> Doc | Skip:
    try:
        record = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        return Skip("not JSON", f"not a JSON line: {one_line(err)}", number)
    if not isinstance(record, dict):
        return Skip("not JSON", f"a JSON {type(record).__name__}, not an object", number)
    values = _fields(record, config, number)
    if isinstance(values, Skip):
        return values
    used = {config.text_field, config.id_field, config.title_field, config.author_field}
    meta = {k: v for k, v in record.items() if k not in used}
    return Doc(
        doc_id=values["doc_id"] or f"{name}:{number}",
        text=values["text"],
        source_format="jsonl",
        title=values["title"],
        author=values["author"],
        source_line=number,
        encoding="utf-8",
        source_char_start=0,
        meta=json.dumps(meta, ensure_ascii=False) if meta else None,
    )


def read_jsonl(path: Path, name: str, config: IngestConfig):
    """One document per non-blank line; a Skip for each line that is not a usable record."""
    number = 0
    try:
        with open_lines(path) as lines:
            for number, line in enumerate(lines, 1):  # `number` is reported after the loop too
                if line.strip():
                    yield _document(line, number, name, config)
    except _read_errors() as err:
        yield Skip(
            "corrupt file",
            f"reading stopped after line {number}: {one_line(err)}; the lines before were kept",
            number + 1,
        )
