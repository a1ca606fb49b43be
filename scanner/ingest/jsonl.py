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


def _string(record: dict, field: str | None, number: int) -> str | Skip | None:
    if field is None or field not in record:
        return None
    value = record[field]
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        return Skip("missing field", f"field '{field}' is a {type(value).__name__}, not a string", number)
    return value


def _document(line: bytes, number: int, name: str, config: IngestConfig) -> Doc | Skip:
    try:
        record = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        return Skip("not JSON", f"not a JSON line: {one_line(err)}", number)
    if not isinstance(record, dict):
        return Skip("not JSON", f"a JSON {type(record).__name__}, not an object", number)
    values = {}
    for key, field in (("text", config.text_field), ("doc_id", config.id_field), ("title", config.title_field),
                       ("author", config.author_field)):
        values[key] = _string(record, field, number)
        if isinstance(values[key], Skip):
            return values[key]
    for key, field in (("text", config.text_field), ("doc_id", config.id_field)):
        if field is not None and values[key] is None:
            return Skip("missing field", f"no '{field}' field; fields are {sorted(record)[:10]}", number)
    if not values["text"].strip():
        return Skip("empty", f"field '{config.text_field}' is empty", number)
    used = {config.text_field, config.id_field, config.title_field, config.author_field}
    meta = {k: v for k, v in record.items() if k not in used}
    return Doc(doc_id=values["doc_id"] or f"{name}:{number}", text=values["text"], source_format="jsonl",
               title=values["title"], author=values["author"], source_line=number, encoding="utf-8",
               source_char_start=0, meta=json.dumps(meta, ensure_ascii=False) if meta else None)


def read_jsonl(path: Path, name: str, config: IngestConfig):
    """One document per non-blank line; a Skip for each line that is not a usable record."""
    number = 0
    try:
        with open_lines(path) as lines:
            for number, line in enumerate(lines, 1):  # `number` is reported after the loop too
                if line.strip():
                    yield _document(line, number, name, config)
    except _read_errors() as err:
        yield Skip("corrupt file", f"reading stopped after line {number}: {one_line(err)}; the lines "
                   "before were kept", number + 1)
