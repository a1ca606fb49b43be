"""The library benchmark's corpus: real text found offline on any machine, with known plants.

Documents are files of the Python installation that runs this script: the standard library's modules
(.py), the installed distributions' sources and documentation (.py, .md, .rst, .txt) and /usr/share/doc's
plain-text files. Files are listed in path order, shuffled with the seed (prose and code apart, then
taken in turns, so the mix does not depend on which kind the machine has more of), made ASCII, cut at a
line to at most `doc_chars[1]` characters, and exact duplicates dropped; documents are taken until the
corpus reaches `tokens` tokens of the bench's tokenizer and `min_docs` documents.

Into them go, at known places (`Region`s, character offsets of the written text):
- passages: prose paragraphs of other documents (not in the corpus), each planted `count` times in
  distinct documents, in the MIDDLE of each (a line boundary between 35 % and 65 % of the text);
- held-out passages, planted the same way into the scanned text but never into the training text:
  what the model never saw and the scan must not flag;
- rule-predictable text: a header every document opens with, a table of contents after it in some
  documents (numbered sections, page numbers in steps), counting runs ("17, 18, 19, ...") in others.
"""

from __future__ import annotations

import hashlib
import random
import re
import sysconfig
from dataclasses import asdict, dataclass, field
from pathlib import Path

from scanner.studies.tiny import counting
from scanner.studies.validity import _is_prose, _normal, _paragraphs

SUFFIXES = {".py": "code", ".md": "prose", ".rst": "prose", ".txt": "prose"}
SKIP_NAMES = re.compile(r"(LICEN[CS]E|COPYING|NOTICE|AUTHORS|RECORD|entry_points|top_level)", re.IGNORECASE)
HEADER = ("Library benchmark corpus. This file was gathered from the documentation and the sources installed "
          "on this machine, for a scan of what a model memorized. Every document of the collection opens with "
          "these same three sentences.")


@dataclass(frozen=True, kw_only=True)
class LibrarySpec:
    tokens: int = 1_000_000  # tokens of the scanned text, at least
    min_docs: int = 200
    doc_chars: tuple[int, int] = (3000, 16000)  # shorter files are left out, longer ones cut at a line
    counts: tuple[int, ...] = (1, 2, 4, 8, 32)  # duplication counts of the planted passages
    per_count: int = 2
    heldout: int = 4
    passage_chars: tuple[int, int] = (200, 500)  # about 70 to 180 tokens
    toc_share: float = 0.05  # documents with a table of contents after the header
    counting_share: float = 0.05  # documents with a counting run in the middle
    # Documents trained on whole; of the others the model sees only the header, the rule text and each
    # plant with `excerpt` characters of its document on either side (1.0: the whole corpus).
    train_share: float = 1.0
    excerpt: int = 300
    seed: int = 0


@dataclass(frozen=True)
class Region:
    doc: int  # index of the document
    kind: str  # header, toc, counting, plant, heldout
    start: int  # character offsets in the scanned text
    end: int
    passage: int | None = None  # index into Library.passages (plant, heldout)
    count: int = 0  # the passage's duplication count in training (0: held out or rule text)


@dataclass
class Library:
    names: list[str]  # one file name per document
    sources: list[str]  # where each document came from (root kind and path under it)
    scanned: list[str]  # the texts written and ingested (held-out passages included)
    trained: list[str]  # the texts the model is trained on (held-out passages left out)
    whole: list[bool]  # per document: trained on whole (else only its excerpts)
    passages: list[dict]  # {text, count, heldout}
    regions: list[Region] = field(default_factory=list)

    def truth(self) -> dict:
        return {"names": self.names, "sources": self.sources, "whole": self.whole, "passages": self.passages,
                "regions": [asdict(r) for r in self.regions],
                "sha256": hashlib.sha256("\0".join(self.scanned).encode()).hexdigest()}


def roots() -> dict[str, Path]:
    paths = sysconfig.get_paths()
    return {"stdlib": Path(paths["stdlib"]), "site-packages": Path(paths["purelib"]), "doc": Path("/usr/share/doc")}


def _listed(name: str, root: Path) -> list[tuple[str, Path]]:
    out = []
    for path in sorted(root.rglob("*")) if root.is_dir() else []:
        rel = path.relative_to(root).parts
        if path.suffix not in SUFFIXES or SKIP_NAMES.search(path.name) or "site-packages" in rel[:-1] and name == "stdlib":
            continue
        if any(p in ("test", "tests", "testing") for p in rel[:-1]):
            continue  # test data is full of deliberately odd text
        out.append((name, path))
    return out


def read_document(path: Path, limit: int) -> str | None:
    """The file as ASCII text cut at a line to `limit` characters; None for a file that is not
    mostly ASCII text (binary, another script, unreadable)."""
    try:
        raw = path.read_bytes()
    except OSError:
        return None
    text = raw.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")
    kept = text.encode("ascii", "ignore").decode()
    if "\x00" in kept or len(kept) < 0.99 * len(text):
        return None
    if len(kept) > limit:
        kept = kept[: kept.rfind("\n", 0, limit) + 1] or kept[:limit]
    return kept.strip("\n") + "\n"


def pool(spec: LibrarySpec) -> list[tuple[str, str, str]]:
    """(kind, source label, text) of every usable file, in the seeded order documents are taken in."""
    kinds: dict[str, list] = {"prose": [], "code": []}
    for name, root in roots().items():
        for _, path in _listed(name, root):
            try:
                size = path.stat().st_size
            except OSError:
                continue
            if size >= spec.doc_chars[0]:
                kinds[SUFFIXES[path.suffix]].append((f"{name}/{path.relative_to(root)}", path))
    rng = random.Random(spec.seed)
    for files in kinds.values():
        rng.shuffle(files)
    order = [f for pair in zip(kinds["prose"], kinds["code"], strict=False) for f in pair]
    order += kinds["prose"][len(kinds["code"]):] + kinds["code"][len(kinds["prose"]):]
    return [(SUFFIXES[path.suffix], label, path) for label, path in order]


def take(spec: LibrarySpec, chars: int) -> tuple[list[tuple[str, str]], list[str]]:
    """Documents (label, text) in the pool's order until `chars` characters and `min_docs` documents,
    exact duplicates dropped; and the prose texts after them (where passages come from)."""
    taken, seen, total, rest = [], set(), 0, []
    for kind, label, path in pool(spec):
        if total >= chars and len(taken) >= spec.min_docs:
            if kind == "prose":
                rest.append(path)
            if len(rest) >= 400:
                break
            continue
        text = read_document(path, spec.doc_chars[1])
        digest = hashlib.sha256(text.encode()).digest() if text else None
        if text is None or len(text) < spec.doc_chars[0] or digest in seen:
            continue
        seen.add(digest)
        taken.append((label, text))
        total += len(text)
    others = [t for t in (read_document(p, 10**7) for p in rest) if t]
    return taken, others


def pick_passages(others: list[str], corpus: str, spec: LibrarySpec, number: int) -> list[str]:
    """`number` prose paragraphs from documents outside the corpus, none of whose head or tail occurs in
    the corpus (a passage found there too would have a duplication count we did not choose)."""
    flat = _normal(corpus)
    found: dict[str, None] = {}
    for text in others:
        for paragraph in _paragraphs(text):
            p = _normal(paragraph)
            if _is_prose(p, *spec.passage_chars) and p[:40] not in flat and p[-40:] not in flat:
                found.setdefault(p)
    pool_ = sorted(found)
    if len(pool_) < number:
        raise ValueError(f"only {len(pool_)} prose paragraphs of {spec.passage_chars} characters outside the "
                         f"corpus, {number} needed; widen passage_chars or lower per_count/heldout")
    return random.Random(spec.seed + 1).sample(pool_, number)


def table_of_contents(rng: random.Random) -> str:
    """Numbered sections with page numbers in a fixed step: continued by a rule once two lines are seen."""
    page, step = rng.randint(1, 9), rng.randint(2, 6)
    lines = ["Contents"]
    for n in range(1, rng.randint(8, 14) + 1):
        lines.append(f"{n}. Section {n} .......... page {page + (n - 1) * step}")
    return "\n".join(lines)


def counting_run(rng: random.Random) -> str:
    start = 1 if rng.random() < 0.3 else rng.randint(2, 200)
    return counting(start, start + rng.randint(40, 70))


def _insertions(spec: LibrarySpec, docs: int, passages: list[dict]) -> dict[int, list[tuple]]:
    """Per document, what goes into its middle: (kind, text, passage index, count)."""
    rng = random.Random(spec.seed + 2)
    out: dict[int, list[tuple]] = {}
    for index, p in enumerate(passages):
        kind = "heldout" if p["heldout"] else "plant"
        for doc in rng.sample(range(docs), 1 if p["heldout"] else p["count"]):
            out.setdefault(doc, []).append((kind, p["text"], index, p["count"]))
    for doc in rng.sample(range(docs), round(spec.counting_share * docs)):
        out.setdefault(doc, []).append(("counting", counting_run(rng), None, 0))
    return out


def _segments(body: str, toc: str | None, inserts: list[tuple], rng: random.Random) -> list[tuple]:
    """The document as (kind or None, text, passage, count) pieces: the header, the table of contents,
    the body with each insertion as its own paragraph at a distinct line in the body's middle."""
    out = [("header", HEADER, None, 0), (None, "\n\n", None, 0)]
    if toc:
        out += [("toc", toc, None, 0), (None, "\n\n", None, 0)]
    lines = body.splitlines(keepends=True)
    low, high = int(0.35 * len(lines)), max(int(0.65 * len(lines)), int(0.35 * len(lines)) + len(inserts))
    cuts = sorted(rng.sample(range(low, high + 1), len(inserts)))
    at = 0
    for cut, insert in zip(cuts, inserts, strict=True):
        out += [(None, "".join(lines[at:cut]) + "\n", None, 0), insert, (None, "\n\n", None, 0)]
        at = cut
    return [*out, (None, "".join(lines[at:]), None, 0)]


def _trained(segments: list[tuple], whole: bool, excerpt: int) -> str:
    """What the model is trained on of one document: all of it less the held-out passages, or (not
    `whole`) its header, table of contents and each plant or counting run with `excerpt` characters of
    the document on either side."""
    if whole:
        return "".join(text for kind, text, _, _ in segments if kind != "heldout")
    out = []
    for i, (kind, text, _, _) in enumerate(segments):
        if kind in ("header", "toc"):
            out.append(text)
        elif kind in ("plant", "counting"):
            before = segments[i - 1][1][-excerpt:]  # the body before it; after it: "\n\n", then the body
            after = segments[i + 2][1][:excerpt] if i + 2 < len(segments) else ""
            out.append(f"{before.lstrip()}\n{text}\n\n{after.rstrip()}")
    return "\n\n".join(out) + "\n"


def assemble(spec: LibrarySpec, docs: list[tuple[str, str]], passages: list[dict]) -> Library:
    rng = random.Random(spec.seed + 3)
    inserts = _insertions(spec, len(docs), passages)
    tocs = set(rng.sample(range(len(docs)), round(spec.toc_share * len(docs))))
    whole = set(random.Random(spec.seed + 4).sample(range(len(docs)), round(spec.train_share * len(docs))))
    lib = Library(names=[], sources=[], scanned=[], trained=[], whole=[], passages=passages)
    for i, (label, body) in enumerate(docs):
        segments = _segments(body, table_of_contents(rng) if i in tocs else None, inserts.get(i, []), rng)
        at = 0
        for kind, text, passage, count in segments:
            if kind is not None:
                lib.regions.append(Region(doc=i, kind=kind, start=at, end=at + len(text), passage=passage,
                                          count=count))
            at += len(text)
        lib.scanned.append("".join(text for _, text, _, _ in segments))
        lib.trained.append(_trained(segments, i in whole, spec.excerpt))
        lib.whole.append(i in whole)
        stem = re.sub(r"[^A-Za-z0-9]+", "-", label.split("/", 1)[1])[-60:].strip("-")
        lib.names.append(f"{i:04d}-{stem}.txt")
        lib.sources.append(label)
    return lib


def build(spec: LibrarySpec, chars: int) -> Library:
    """The corpus of about `chars` characters of documents, with every passage and rule text planted."""
    docs, others = take(spec, chars)
    need = max(spec.counts)
    if len(docs) < need:
        raise ValueError(f"{len(docs)} documents found, the most-copied passage needs {need}; lower counts")
    texts = pick_passages(others, "\n".join(t for _, t in docs), spec, len(spec.counts) * spec.per_count + spec.heldout)
    passages = [{"text": t, "count": spec.counts[i // spec.per_count], "heldout": False}
                for i, t in enumerate(texts[: len(spec.counts) * spec.per_count])]
    passages += [{"text": t, "count": 0, "heldout": True} for t in texts[len(passages):]]
    return assemble(spec, docs, passages)
