"""The book's text around each flagged passage, for the report's pages (results/report_pages.py).

Read from the corpus one shard at a time, only the shards that hold a passage, and of each document only
a window of `chars` characters either side of the passage is kept: a page shows a passage in its setting
without the report holding any book whole. A window is given only where the document still holds the
passage's own text at its offsets; a corpus edited or replaced since the scan would otherwise put the
finding in a setting it never had, so such a page says the text was not found instead.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from scanner.stages.read import Corpus
from scanner.storage.rundir import Plan

log = logging.getLogger(__name__)

CONTEXT_CHARS = 1200  # either side: a few paragraphs, enough to see where in the chapter it stands


@dataclass(frozen=True)
class Wanted:
    """One page's passage: where it stands and what the document must hold there."""

    page: str  # the page's id
    key: str  # doc_row, or doc_id for results written without it
    shard: int  # the shard of the run plan that holds the document
    char_start: int
    char_end: int
    text: str  # document[char_start:char_end] as the scan saw it
    reach: int  # the end of what the page shows of the passage (its verified extension included)


def window(text: str, wanted: Wanted, chars: int) -> dict | None:
    """The document's text around the passage (None when the document no longer holds it there):
    `text` from character `offset` on, `doc_chars` the document's length."""
    if text[wanted.char_start : wanted.char_end] != wanted.text:
        return None
    lo, hi = max(0, wanted.char_start - chars), min(len(text), max(wanted.reach, wanted.char_end) + chars)
    return {"text": text[lo:hi], "offset": lo, "doc_chars": len(text)}


def surroundings(
    corpus: Corpus, plan: Plan, wanted: list[Wanted], chars: int = CONTEXT_CHARS
) -> dict[str, dict]:
    """{page: window(...)} for every wanted passage the corpus still holds; shards read in order, one at a
    time, their documents dropped once cut."""
    shards = {s.shard: s for s in plan}
    by_shard: dict[int, list[Wanted]] = {}
    for item in wanted:
        by_shard.setdefault(item.shard, []).append(item)
    found: dict[str, dict] = {}
    for number in sorted(by_shard):
        shard = shards.get(number)
        if shard is None:
            continue
        keys = {item.key for item in by_shard[number]}
        texts = {}
        for doc in corpus.documents(shard.doc_start, shard.doc_end):
            key = doc.row if doc.row in keys else doc.doc_id
            if key in keys and doc.text is not None:
                texts[key] = doc.text
        for item in by_shard[number]:
            cut = window(texts[item.key], item, chars) if item.key in texts else None
            if cut is not None:
                found[item.page] = cut
    missing = len(wanted) - len(found)
    if missing:
        log.warning(
            "%d of %d passages not found at their offsets in the corpus (edited since the scan?); "
            "their pages show no surrounding text",
            missing,
            len(wanted),
        )
    return found
