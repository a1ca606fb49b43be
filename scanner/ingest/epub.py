"""EPUB: the spine's documents in reading order, one paragraph per line, with the book's metadata.

ebooklib reads the container, the package (OPF) metadata, manifest and spine; lxml parses each XHTML
document. The text is what a reader sees: block elements (paragraphs, headings, list items, table
cells, ...) and <br> end a line, whitespace inside a line collapses to one space, <head>, <script> and
<style> are left out. Spine items are joined by a blank line and each one's character range is kept
(`sections`), so a passage found by a scan points back to its chapter file inside the EPUB.
"""

from __future__ import annotations

import html.entities
import logging
import posixpath
from pathlib import Path

from scanner.ingest.common import Doc, IngestConfig, Skip, one_line

log = logging.getLogger(__name__)

SECTION_SEPARATOR = "\n\n"
BLOCKS = frozenset(
    """address article aside blockquote body caption center dd details div dl dt fieldset
    figcaption figure footer form h1 h2 h3 h4 h5 h6 header hr li main nav ol p pre section summary table
    tbody td tfoot th thead tr ul""".split()
)
HIDDEN = frozenset({"head", "script", "style", "title", "template"})


def _local(tag) -> str | None:
    """'{http://www.w3.org/1999/xhtml}p' -> 'p'; None for comments, processing instructions, entities."""
    return tag.rsplit("}", 1)[-1].lower() if isinstance(tag, str) else None


def _entity(node) -> str:
    # Entities are kept unresolved (no DTD is ever fetched): XHTML's named ones from the standard table.
    return html.entities.html5.get(f"{node.name};", "")


def _parse(content: bytes):
    from lxml import etree
    from lxml import html as lxml_html

    # recover: publishers' XHTML is often not well-formed; no_network: never fetch a DTD.
    parser = etree.XMLParser(recover=True, resolve_entities=False, no_network=True, huge_tree=True)
    try:
        root = etree.fromstring(content, parser)
    except etree.XMLSyntaxError:
        root = None
    # A document the XML parser cannot place at all is tried as HTML (tag soup named .xhtml).
    return root if root is not None else lxml_html.fromstring(content)


def html_lines(content: bytes) -> list[str]:
    """The visible text of one (X)HTML document, one block per line, in document order."""
    from lxml import etree

    lines: list[str] = []
    current: list[str] = []

    def flush() -> None:
        line = " ".join("".join(current).split())
        if line:
            lines.append(line)
        current.clear()

    walker = etree.iterwalk(_parse(content), events=("start", "end"))
    for event, node in walker:
        tag = _local(node.tag)
        if event == "start":
            if tag in HIDDEN:
                walker.skip_subtree()
                continue
            if tag in BLOCKS or tag == "br":
                flush()
            if tag is None and isinstance(node, etree._Entity):
                current.append(_entity(node))
            elif tag is not None and node.text:
                current.append(node.text)
        else:
            if tag in BLOCKS:
                flush()
            if node.tail:
                current.append(node.tail)
    flush()
    return lines


def _metadata(book, name: str) -> list[str]:
    return [str(value).strip() for value, _ in book.get_metadata("DC", name) if value and str(value).strip()]


def _load(path: Path):
    """The book and the folder of its package file inside the zip (item paths are relative to it)."""
    from ebooklib import epub

    reader = epub.EpubReader(str(path), {"ignore_ncx": True})
    try:
        return reader.load(), reader.opf_dir
    finally:
        if reader.zf is not None:
            reader.zf.close()


def _sections(book, opf_dir: str):
    """(zip path of the item, its lines) for each spine document, or Skips for items that are missing."""
    import ebooklib

    for idref, _linear in book.spine:
        # Non-linear items (notes, answers) are part of the book's text too: kept, in spine order.
        item = book.get_item_with_id(idref)
        if item is None:
            yield Skip("missing item", f"spine entry '{idref}' is not in the manifest")
            continue
        where = posixpath.normpath(posixpath.join(opf_dir, item.get_name()))
        if item.get_type() != ebooklib.ITEM_DOCUMENT:
            yield Skip("missing item", f"spine item {where} is not an XHTML document", status="note")
            continue
        try:
            yield where, html_lines(item.get_content())
        except Exception as err:  # lxml raises many kinds; one bad chapter is logged, not fatal
            yield Skip("unreadable item", f"item {where}: {one_line(err)}")


def read_epub(path: Path, name: str, config: IngestConfig):
    """One EPUB as one document (with its sections), Skips for what could not be read."""
    try:
        book, opf_dir = _load(path)
    except Exception as err:  # a corrupt zip or OPF raises anything from zipfile to lxml
        log.debug("cannot read %s", path, exc_info=True)
        yield Skip("corrupt epub", f"cannot read the EPUB: {one_line(err)}")
        return
    parts, sections, position = [], [], 0
    for section in _sections(book, opf_dir):
        if isinstance(section, Skip):
            yield section
            continue
        where, lines = section
        if not lines:
            continue
        chunk = "\n".join(lines)
        position += len(SECTION_SEPARATOR) if parts else 0
        sections.append({"path": where, "char_start": position, "char_end": position + len(chunk)})
        parts.append(chunk)
        position += len(chunk)
    if not parts:
        yield Skip("empty", "the EPUB's spine holds no text")
        return
    authors = _metadata(book, "creator")
    yield Doc(
        doc_id=name,
        text=SECTION_SEPARATOR.join(parts),
        source_format="epub",
        title=next(iter(_metadata(book, "title")), None),
        author="; ".join(authors) or None,
        language=next(iter(_metadata(book, "language")), None),
        sections=sections,
    )
