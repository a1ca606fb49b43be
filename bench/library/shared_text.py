"""How many documents hold the same text, in a library of real installed text with known plants: what
chooses the default of --shared-text-min-docs (issue 31 item 1). No model and no scan: exact lines.

    python bench/library/shared_text.py [--chars 2700000]

The corpus is the library benchmark's (bench/library/library_corpus.py, the same spec: a header every document
opens with, prose passages planted in 1, 2, 4, 8 and 32 documents, tables of contents in 5 %). For every
line of at least 60 characters (stripped), the number of documents holding it; printed: the holders of
the header and of each plant, and how the corpus's own repeated lines (licence headers of one package's
files, generated boilerplate) spread over holder counts, with the most held ones.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict

from library_corpus import LibrarySpec, build

MIN_CHARS = 60


def holders(texts: list[str]) -> dict[str, int]:
    docs = defaultdict(set)
    for i, text in enumerate(texts):
        for line in text.splitlines():
            line = line.strip()
            if len(line) >= MIN_CHARS:
                docs[line].add(i)
    return {line: len(held) for line, held in docs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chars", type=int, default=2_700_000)
    args = parser.parse_args()
    lib = build(LibrarySpec(), args.chars)
    held = holders(lib.scanned)
    planted = {line.strip() for r in lib.regions if r.kind in ("header", "plant", "heldout", "toc")
               for line in lib.scanned[r.doc][r.start:r.end].splitlines()}
    natural = {line: n for line, n in held.items() if n > 1 and line not in planted}
    header = max(held.get(line.strip(), 0) for r in lib.regions if r.kind == "header"
                 for line in lib.scanned[r.doc][r.start:r.end].splitlines() if len(line.strip()) >= MIN_CHARS)
    plants = sorted({(p["count"], max((held.get(line.strip(), 0) for line in p["text"].splitlines()
                                       if len(line.strip()) >= MIN_CHARS), default=0))
                     for p in lib.passages if not p["heldout"]})
    bins = Counter(next(f"{lo}-{hi}" for lo, hi in ((2, 2), (3, 4), (5, 9), (10, 19), (20, 49), (50, 10**9))
                        if lo <= n <= hi) for n in natural.values())
    top = sorted(natural.items(), key=lambda kv: -kv[1])[:8]
    print(json.dumps({"documents": len(lib.scanned), "header_held_by": header,
                      "plants_(copies, held_by)": plants, "natural_repeated_lines_by_holders": dict(sorted(bins.items())),
                      "most_held_natural_lines": [[n, line[:90]] for line, n in top]}, indent=1))


if __name__ == "__main__":
    main()
