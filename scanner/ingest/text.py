"""Plain text: decoding bytes of unknown encoding, refusing binary files, Project Gutenberg boilerplate.

Decoding order: a byte-order mark decides; else NUL bytes mean a binary file; else strict UTF-8; else
--encoding when given; else charset-normalizer's detection, and a file it cannot place is refused with
its name (never decoded with replacement characters). Newlines are normalized as Python's text mode
does (universal newlines), so `open(path, encoding=enc).read()` gives the same string the offsets use.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import replace
from pathlib import Path

from scanner.ingest.common import Doc, IngestConfig, Skip, one_line

# UTF-32-LE's mark starts with UTF-16-LE's, so the longer marks are tried first.
BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
# Control characters other than whitespace: a few occur in real texts (form feeds, stray escapes),
# a larger share means the bytes were never text.
MAX_CONTROL_SHARE = 0.01
CONTROLS = re.compile(r"[\x00-\x08\x0e-\x1f\x7f-\x9f]")  # Unicode category Cc less \t \n \v \f \r


class Refused(Exception):
    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind, self.reason = kind, reason


def _detect(data: bytes) -> tuple[str, str]:
    from charset_normalizer import from_bytes

    best = from_bytes(data).best()
    if best is None:
        raise Refused(
            "undecodable",
            "not UTF-8, and charset-normalizer found no encoding that fits; "
            "pass --encoding ENC if you know it (e.g. cp1252)",
        )
    try:
        return data.decode(best.encoding), best.encoding
    except (UnicodeDecodeError, LookupError) as err:
        raise Refused("undecodable", f"detected {best.encoding} but {one_line(err)}") from err


def _decode_bytes(data: bytes, forced: str | None) -> tuple[str, str]:
    for bom, encoding in BOMS:
        if data.startswith(bom):
            try:
                return data.decode(encoding), encoding
            except UnicodeDecodeError as err:
                raise Refused(
                    "undecodable", f"starts with a {encoding} byte-order mark but {one_line(err)}"
                ) from err
    if b"\x00" in data:
        raise Refused("binary", "contains NUL bytes: not a text file")
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        pass
    if forced is not None:
        try:
            return data.decode(forced), forced
        except UnicodeDecodeError as err:
            raise Refused("undecodable", f"neither UTF-8 nor --encoding {forced}: {one_line(err)}") from err
    return _detect(data)


def decode(data: bytes, forced: str | None = None) -> tuple[str, str]:
    """(text with universal newlines, the encoding) or Refused(kind, reason)."""
    if not data:
        raise Refused("empty", "the file is empty (0 bytes)")
    text, encoding = _decode_bytes(data, forced)
    controls = len(CONTROLS.findall(text))
    if controls > MAX_CONTROL_SHARE * len(text):
        raise Refused(
            "binary", f"{controls} of {len(text)} characters are control characters: not a text file"
        )
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if not text.strip():
        raise Refused("empty", "the file holds only whitespace")
    return text, encoding


def read_text_file(path: Path, name: str, config: IngestConfig):
    """One text file (.txt, .md) as one document, or one Skip."""
    try:
        text, encoding = decode(path.read_bytes(), config.encoding)
    except Refused as refused:
        yield Skip(refused.kind, refused.reason)
        return
    except OSError as err:
        yield Skip("unreadable", one_line(err))
        return
    yield Doc(doc_id=name, text=text, source_format="text", encoding=encoding, source_char_start=0)


# Project Gutenberg: what the stripping keys on. Every PG text (plain text, HTML and EPUB alike) frames
# the book between two marker lines, "*** START OF THE PROJECT GUTENBERG EBOOK <TITLE> ***" and
# "*** END OF THE PROJECT GUTENBERG EBOOK <TITLE> ***" (older files: "THIS" for "THE", "EBOOK" spelled
# "E-BOOK", no space after the asterisks). Everything up to the end of the START line (PG's header:
# title page data, the licence summary) and everything from the END line on (the full licence) goes,
# and so does a closing "End of (the) Project Gutenberg('s) ..." line just before the END marker.
# A text with neither marker is kept whole and noted in the log.
_MARKER = r"^[ \t]*\*{3}[ \t]*{which} OF (?:THE|THIS) PROJECT GUTENBERG E-?BOOK\b[^\n]*$"
START = re.compile(_MARKER.replace("{which}", "START"), re.IGNORECASE | re.MULTILINE)
END = re.compile(_MARKER.replace("{which}", "END"), re.IGNORECASE | re.MULTILINE)
CLOSING = re.compile(r"\n[ \t]*End of (?:the )?Project Gutenberg(?:'s)?\b[^\n]*\s*\Z", re.IGNORECASE)
HEADER_FIELD = r"^(?:{name}):[ \t]*(\S[^\n]*)$"


def _header_field(header: str, name: str) -> str | None:
    match = re.search(HEADER_FIELD.format(name=name), header, re.IGNORECASE | re.MULTILINE)
    return match.group(1).strip() if match else None


def _trimmed(text: str, start: int, end: int) -> tuple[int, int]:
    """[start, end) without the whitespace at either edge."""
    body = text[start:end]
    lead = len(body) - len(body.lstrip())
    return start + lead, start + len(body.rstrip())


def strip_gutenberg(doc: Doc) -> tuple[Doc, Skip | None]:
    """The document without PG's header and licence footer; title and author taken from the header
    where the document has none. A Skip (status 'note') tells when the markers were not found."""
    start, end = START.search(doc.text), END.search(doc.text)
    if start is None and end is None:
        return doc, Skip(
            "no gutenberg markers",
            "--strip gutenberg: no '*** START/END OF THE PROJECT "
            "GUTENBERG EBOOK' marker lines; kept the whole text",
            status="note",
        )
    a = start.end() if start else 0
    b = end.start() if end and end.start() >= a else len(doc.text)
    closing = CLOSING.search(doc.text, a, b)
    a, b = _trimmed(doc.text, a, closing.start() if closing else b)
    if a >= b:
        return doc, Skip(
            "empty after strip",
            "--strip gutenberg left no text between the markers; kept the whole text",
            status="note",
        )
    header = doc.text[: start.start()] if start else ""
    return replace(
        doc.sliced(a, b),
        title=doc.title or _header_field(header, "Title"),
        author=doc.author or _header_field(header, "Author"),
    ), None
