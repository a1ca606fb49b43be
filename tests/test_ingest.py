"""`acr-scan ingest`: text folders, EPUB books and JSONL dumps into a Parquet corpus that `scan` reads.

Every source is made here: EPUBs with ebooklib and by hand with zipfile, a folder of text files (one
Latin-1, one with CRLF newlines and Project Gutenberg's frame), gzip and zstd JSONL, and bad files of
each kind. Offsets are checked against the source files themselves."""

import gzip
import hashlib
import json
import random
import re
import zipfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import zstandard
from clirun import cli
from lxml import etree

from scanner.errors import InputError
from scanner.ingest import IngestConfig, ingest
from scanner.ingest.common import Doc
from scanner.ingest.epub import html_lines
from scanner.ingest.text import Refused, decode, strip_gutenberg
from scanner.schema import ingested_schema
from scanner.studies.tiny import CANARIES, salad

# tests/test_scan.py's small settings, and one search per document (the best-screened span) to keep it short.
SCAN = [
    "--span-tokens",
    "12",
    "--stride",
    "2",
    "--context-tokens",
    "16",
    "--docs-per-shard",
    "1",
    "--min-match-rate",
    "0.95",
    "--max-candidates-per-doc",
    "1",
    "--steps",
    "40",
    "--candidates",
    "64",
    "--top-k",
    "64",
    "--restarts",
    "0",
]
FRENCH = (
    "Le café de la gare était fermé à cause de la grève. Où est passé le garçon? Il a mangé une crème "
    "brûlée.\nÇa m'étonne beaucoup, dit-elle, en français, près de la fenêtre où l'été s'achève.\n"
)


def write_epub(path: Path, chapters: list[tuple[str, list[str]]], title="A Test Novel", author="Ann Author"):
    """An EPUB made with ebooklib; the manifest lists the chapters backwards, the spine in order."""
    from ebooklib import epub

    book = epub.EpubBook()
    book.set_identifier(path.stem)
    book.set_title(title)
    book.set_language("en")
    book.add_author(author)
    items = []
    for number, (heading, paragraphs) in enumerate(chapters, 1):
        item = epub.EpubHtml(title=heading, file_name=f"chap{number}.xhtml", lang="en")
        item.content = f"<h1>{heading}</h1>" + "".join(f"<p>{p}</p>" for p in paragraphs)
        items.append(item)
    for item in reversed(items):
        book.add_item(item)
    book.toc = tuple(items)
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = items
    epub.write_epub(str(path), book)
    return path


CONTAINER = (
    '<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">'
    '<rootfiles><rootfile full-path="OPS/book.opf" media-type="application/oebps-package+xml"/>'
    "</rootfiles></container>"
)
OPF = """<?xml version="1.0" encoding="utf-8"?>
<package xmlns="http://www.idpf.org/2007/opf" version="2.0" unique-identifier="uid">
 <metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>Hand Made</dc:title>
  <dc:creator>First Writer</dc:creator><dc:creator>Second Writer</dc:creator>
  <dc:identifier id="uid">hand-made</dc:identifier><dc:language>fr</dc:language></metadata>
 <manifest><item id="b" href="text/b.xhtml" media-type="application/xhtml+xml"/>
  <item id="a" href="text/a.xhtml" media-type="application/xhtml+xml"/>
  <item id="css" href="style.css" media-type="text/css"/></manifest>
 <spine><itemref idref="a"/><itemref idref="b"/><itemref idref="gone"/></spine>
</package>"""
XHTML = """<?xml version="1.0" encoding="utf-8"?>
<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.1//EN" "http://www.w3.org/TR/xhtml11/DTD/xhtml11.dtd">
<html xmlns="http://www.w3.org/1999/xhtml"><head><title/><style>p {{ margin: 0 }}</style></head>
<body><div class="chapter">{body}</div><script>var hidden = 1;</script></body></html>"""
CHAPTER_A = (
    "<h2>Premier</h2><p>Mr.&nbsp;Darcy &amp; <em>Eliza</em>&mdash;caf&eacute;</p><!-- a note -->"
    "<div><p>Nested</p> tail text</div><p>Two<br/>lines</p>"
)


def write_handmade_epub(path: Path) -> Path:
    """An EPUB 2 made with zipfile: entities its DTD would define, an empty <title/>, script and style,
    a spine entry missing from the manifest."""
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        z.writestr("META-INF/container.xml", CONTAINER)
        z.writestr("OPS/book.opf", OPF)
        z.writestr("OPS/text/a.xhtml", XHTML.format(body=CHAPTER_A))
        z.writestr("OPS/text/b.xhtml", XHTML.format(body=f"<p>{CANARIES[1]}</p>"))
        z.writestr("OPS/style.css", "p { margin: 0 }")
    return path


def gutenberg(body: str) -> str:
    """A Project Gutenberg plain-text file around `body`, with CRLF newlines as PG ships them."""
    text = (
        "The Project Gutenberg eBook of Test Book\n\nThis eBook is for the use of anyone anywhere.\n\n"
        "Title: Test Book\n\nAuthor: Some Body\n\nRelease date: May 1, 2001 [eBook #99999]\n\n"
        "*** START OF THE PROJECT GUTENBERG EBOOK TEST BOOK ***\n\n\n" + body + "\n\n\n"
        "End of the Project Gutenberg EBook of Test Book, by Some Body\n\n"
        "*** END OF THE PROJECT GUTENBERG EBOOK TEST BOOK ***\n\nSection 1. General Terms of Use and "
        "Redistributing Project Gutenberg electronic works\n"
    )
    return text.replace("\n", "\r\n")


def planted(seed: int, canary: str) -> str:
    rng = random.Random(seed)
    return f"{salad(rng, 14)}\n{canary}\n{salad(rng, 10)}"


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    """books/ (EPUBs, text files, a cover image, bad files) and dumps/ (JSONL, gzip, zstd)."""
    root = tmp_path_factory.mktemp("library")
    books, bad, dumps = root / "books", root / "books" / "bad", root / "dumps"
    for folder in (books, bad, dumps):
        folder.mkdir(parents=True)
    write_epub(
        books / "novel.epub",
        [
            ("Chapter One", ["First &amp; <em>best</em>\n paragraph.", "Short."]),
            ("Chapter Two", planted(1, CANARIES[0]).split("\n")),
        ],
    )
    write_handmade_epub(books / "handmade.epub")
    (books / "pg.txt").write_bytes(gutenberg(planted(2, CANARIES[2])).encode("utf-8"))
    (books / "latin1.txt").write_bytes(FRENCH.encode("latin-1"))
    (books / "notes.md").write_bytes("\ufeff# Notes\n\nPlain *markdown*, kept as it is.\n".encode("utf-8"))
    (books / "cover.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    (bad / "empty.txt").write_bytes(b"")
    (bad / "binary.txt").write_bytes(bytes(range(256)) * 4)
    rng = random.Random(0)
    (bad / "garbled.txt").write_bytes(bytes(rng.randrange(128, 256) for _ in range(600)))
    (bad / "broken.epub").write_bytes(b"PK\x03\x04 this is not a whole zip archive")
    lines = [
        json.dumps({"id": "j1", "text": "A first record.", "meta": {"lang": "en"}, "year": 1851}),
        "{not json",
        json.dumps({"id": "j2", "body": "no text field"}),
        "",
        json.dumps({"id": "j3", "text": "  "}),
        json.dumps({"id": 4, "text": "An integer id."}),
    ]
    (dumps / "a.jsonl.gz").write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    records = [json.dumps({"id": f"z{i}", "text": f"Zstd record {i}.", "title": f"T{i}"}) for i in range(3)]
    records.append(json.dumps({"id": "j1", "text": "The id of the first gzip record again."}))
    (dumps / "b.jsonl.zst").write_bytes(
        zstandard.ZstdCompressor().compress(("\n".join(records) + "\n").encode())
    )
    return root


@pytest.fixture(scope="module")
def ingested(library):
    out = library / "corpus.parquet"
    run = cli(
        "ingest",
        str(library / "books"),
        str(library / "dumps" / "*.jsonl.*"),
        "--out",
        str(out),
        "--strip",
        "gutenberg",
        "--id-field",
        "id",
        "--title-field",
        "title",
    )
    assert run.returncode == 0, run.stderr
    rows = {r["doc_id"]: r for r in pq.read_table(out).to_pylist()}
    log = [json.loads(line) for line in (library / "corpus.ingest-log.jsonl").read_text().splitlines()]
    return out, rows, log, run.stdout


def test_every_source_becomes_one_row_in_the_ingested_schema(ingested):
    out, rows, _, stdout = ingested
    assert pq.read_schema(out).equals(ingested_schema(), check_metadata=False)
    assert set(rows) == {
        "books/novel.epub",
        "books/handmade.epub",
        "books/pg.txt",
        "books/latin1.txt",
        "books/notes.md",
        "j1",
        "4",
        "z0",
        "z1",
        "z2",
    }
    assert "ingested 10 documents (epub 2, jsonl 5, text 3;" in stdout
    for row in rows.values():
        data = Path(row["source_path"]).read_bytes()
        assert row["source_bytes"] == len(data) and row["source_sha256"] == hashlib.sha256(data).hexdigest()


def test_epub_text_is_in_spine_order_one_paragraph_per_line_with_metadata(ingested):
    _, rows, log, _ = ingested
    novel = rows["books/novel.epub"]
    assert (novel["title"], novel["author"], novel["language"]) == ("A Test Novel", "Ann Author", "en")
    assert novel["text"].startswith("Chapter One\nFirst & best paragraph.\nShort.\n\nChapter Two\n")
    assert [s["path"] for s in novel["sections"]] == ["EPUB/chap1.xhtml", "EPUB/chap2.xhtml"]
    hand = rows["books/handmade.epub"]
    assert (hand["title"], hand["author"], hand["language"]) == (
        "Hand Made",
        "First Writer; Second Writer",
        "fr",
    )
    assert hand["text"] == (
        "Premier\nMr.\u00a0Darcy & Eliza\u2014café\nNested\ntail text\nTwo\nlines\n\n" + CANARIES[1]
    ).replace("\u00a0", " ")
    assert {
        "source": hand["source_path"],
        "line": None,
        "status": "skipped",
        "kind": "missing item",
        "reason": "spine entry 'gone' is not in the manifest",
    } in log


def test_text_files_are_decoded_and_gutenberg_boilerplate_is_stripped(ingested):
    _, rows, _, _ = ingested
    latin = rows["books/latin1.txt"]
    assert latin["text"] == FRENCH and latin["encoding"] in ("cp1252", "latin_1", "iso8859_15")
    notes = rows["books/notes.md"]
    assert notes["encoding"] == "utf-8-sig" and notes["text"].startswith("# Notes")
    pg = rows["books/pg.txt"]
    assert pg["text"] == planted(2, CANARIES[2]), "header, closing line and licence gone; CRLF -> LF"
    assert (pg["title"], pg["author"]) == ("Test Book", "Some Body")
    assert "GUTENBERG" not in pg["text"].upper()


def test_offsets_into_the_ingested_text_point_back_to_the_source(ingested):
    _, rows, _, _ = ingested
    for row in rows.values():
        if row["source_format"] == "text":
            with open(row["source_path"], encoding=row["encoding"]) as f:
                source = f.read()
        elif row["source_format"] == "jsonl":
            with (gzip.open if row["source_path"].endswith(".gz") else zstandard.open)(
                row["source_path"], "rt"
            ) as f:
                source = json.loads(f.read().splitlines()[row["source_line"] - 1])["text"]
        else:
            with zipfile.ZipFile(row["source_path"]) as z:
                for section in row["sections"]:
                    lines = row["text"][section["char_start"] : section["char_end"]].split("\n")
                    assert lines == html_lines(z.read(section["path"]))
            continue
        start = row["source_char_start"]
        assert source[start : start + len(row["text"])] == row["text"], row["doc_id"]


def test_jsonl_records_keep_their_line_ids_titles_and_other_fields(ingested):
    _, rows, _, _ = ingested
    assert rows["j1"]["source_line"] == 1 and json.loads(rows["j1"]["meta"]) == {
        "meta": {"lang": "en"},
        "year": 1851,
    }
    assert rows["4"]["text"] == "An integer id." and rows["4"]["source_line"] == 6
    assert [rows[f"z{i}"]["title"] for i in range(3)] == ["T0", "T1", "T2"]


def test_bad_sources_are_skipped_with_a_reason_and_counted(ingested, library):
    _, _, log, stdout = ingested
    kinds = {(Path(e["source"]).name, e["line"], e["kind"]) for e in log if e["status"] == "skipped"}
    assert kinds == {
        ("empty.txt", None, "empty"),
        ("binary.txt", None, "binary"),
        ("garbled.txt", None, "undecodable"),
        ("broken.epub", None, "corrupt epub"),
        ("a.jsonl.gz", 2, "not JSON"),
        ("a.jsonl.gz", 3, "missing field"),
        ("a.jsonl.gz", 5, "empty"),
        ("handmade.epub", None, "missing item"),
        ("b.jsonl.zst", 4, "duplicate id"),
    }
    assert (
        "skipped 9 (binary 1, corrupt epub 1, duplicate id 1, empty 2, missing field 1, missing item 1, "
        "not JSON 1, undecodable 1)" in stdout
    )
    assert "ignored 1 file(s) of other types" in stdout
    assert [e["source"] for e in log if e["status"] == "ignored"] == [str(library / "books" / "cover.jpg")]
    garbled = next(e for e in log if e["source"].endswith("garbled.txt"))
    assert "--encoding" in garbled["reason"]


def test_ingest_is_atomic_and_deterministic(ingested, library, tmp_path):
    out, _, _, _ = ingested
    again = tmp_path / "again.parquet"
    ingest(
        IngestConfig(
            sources=(str(library / "books"), str(library / "dumps" / "*.jsonl.*")),
            out=str(again),
            strip=("gutenberg",),
            id_field="id",
            title_field="title",
        )
    )
    assert again.read_bytes() == out.read_bytes(), "same files and options: same corpus fingerprint for scan"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["again.ingest-log.jsonl", "again.parquet"], (
        "no temp file"
    )


def test_nothing_ingested_exits_2_and_still_writes_the_log_with_every_reason(library, tmp_path):
    run = cli("ingest", str(library / "books" / "bad"), "--out", str(tmp_path / "c.parquet"))
    assert run.returncode == 2 and "nothing could be ingested" in run.stderr and "skipped 4" in run.stderr
    assert "Traceback" not in run.stderr and not (tmp_path / "c.parquet").exists()
    log = [json.loads(line) for line in (tmp_path / "c.ingest-log.jsonl").read_text().splitlines()]
    assert sorted(e["kind"] for e in log) == ["binary", "corrupt epub", "empty", "undecodable"]


@pytest.mark.parametrize(
    "sources, options, message",
    [
        (["{lib}/nowhere"], {}, "does not exist"),
        (["{lib}/books/*.pdf"], {}, "no files match the glob"),
        (["{lib}/books/cover.jpg"], {}, "is not a supported type"),
        (["{lib}/books"], {"out": "{tmp}/corpus.csv"}, "must name a .parquet file"),
        (["{lib}/books"], {"out": "{tmp}/missing/corpus.parquet"}, "does not exist; create it first"),
        (["{lib}/books"], {"out": "{tmp}"}, "is a folder"),
        (["{lib}/books"], {"encoding": "klingon"}, "--encoding 'klingon' is not an encoding"),
        (["{lib}/books"], {"strip": ("boilerplate",)}, "--strip boilerplate is not known"),
    ],
)
def test_a_bad_source_or_output_path_is_refused_naming_the_fix(library, tmp_path, sources, options, message):
    def fill(value):
        return value.format(lib=library, tmp=tmp_path) if isinstance(value, str) else value

    options = {"out": str(tmp_path / "corpus.parquet"), **{k: fill(v) for k, v in options.items()}}
    with pytest.raises(InputError, match=re.escape(message)):
        ingest(IngestConfig(sources=tuple(fill(s) for s in sources), **options))
    assert not (tmp_path / "corpus.parquet").exists()


def test_a_broken_compressed_stream_keeps_the_lines_before_the_break(tmp_path):
    whole = gzip.compress(
        b"".join(json.dumps({"text": f"line {i} " * 50}).encode() + b"\n" for i in range(200))
    )
    (tmp_path / "cut.jsonl.gz").write_bytes(whole[: len(whole) // 2])
    summary = ingest(IngestConfig(sources=(str(tmp_path / "cut.jsonl.gz"),), out=str(tmp_path / "c.parquet")))
    rows = pq.read_table(tmp_path / "c.parquet").to_pylist()
    assert rows and [r["doc_id"] for r in rows] == [f"cut.jsonl.gz:{i}" for i in range(1, len(rows) + 1)]
    assert summary.skipped == {"corrupt file": 1}
    log = [json.loads(line) for line in (tmp_path / "c.ingest-log.jsonl").read_text().splitlines()]
    assert [e["kind"] for e in log] == ["corrupt file"] and "lines before were kept" in log[0]["reason"]


@pytest.mark.parametrize(
    "data, expected",
    [
        ("naïve".encode("utf-16"), ("naïve", "utf-16")),
        (b"a\r\nb\rc\n", ("a\nb\nc\n", "utf-8")),
        (FRENCH.encode("cp1252"), (FRENCH, "cp1252")),
    ],
)
def test_decode(data, expected):
    assert decode(data) == expected


@pytest.mark.parametrize(
    "data, kind",
    [(b"", "empty"), (b" \n\t", "empty"), (b"ab\x00cd", "binary"), (b"text\x1b\x1b\x1b\x02", "binary")],
)
def test_decode_refuses(data, kind):
    with pytest.raises(Refused) as refused:
        decode(data)
    assert refused.value.kind == kind


@pytest.mark.parametrize(
    "text, kept",
    [
        ("Just a book.\n", None),
        ("*** START OF THIS PROJECT GUTENBERG EBOOK X ***\nBody.\n", "Body."),
        (
            "***START OF THE PROJECT GUTENBERG E-BOOK X***\nBody.\n*** END OF THE PROJECT GUTENBERG EBOOK X ***\nL",
            "Body.",
        ),
        (
            "Head\nBody.\nEnd of Project Gutenberg's X, by Y\n*** END OF THE PROJECT GUTENBERG EBOOK X ***\n",
            "Head\nBody.",
        ),
    ],
)
def test_gutenberg_markers_and_what_is_kept(text, kept):
    doc = Doc(doc_id="d", text=text, source_format="text", source_char_start=0)
    stripped, note = strip_gutenberg(doc)
    if kept is None:
        assert stripped == doc and note.status == "note" and note.kind == "no gutenberg markers"
    else:
        assert note is None and stripped.text == kept
        assert text[stripped.source_char_start : stripped.source_char_start + len(kept)] == kept


def located(doc: dict, row: dict) -> str | bool:
    """Find a result row in the source file: for an EPUB the chapter file (zip member) it sits in, for
    a text file whether the same characters stand there, shifted past the stripped header."""
    if doc["source_format"] == "epub":
        # The first section that ends after the span's start (a span may start on the blank line between two).
        section = next(s for s in doc["sections"] if row["char_start"] < s["char_end"])
        with zipfile.ZipFile(doc["source_path"]) as z:
            words = " ".join("".join(etree.fromstring(z.read(section["path"])).itertext()).split())
        # A paragraph is a line; a span may run on across a line end into the next paragraph.
        first_line = " ".join(row["text"].strip().split("\n")[0].split())
        assert first_line in words, (first_line, section["path"])
        return section["path"]
    with open(doc["source_path"], encoding=doc["encoding"]) as f:
        source = f.read()
    start = doc["source_char_start"] + row["char_start"]
    return source[start : start + len(row["text"])] == row["text"]


def test_a_scanned_ingested_corpus_flags_passages_that_point_back_into_their_sources(
    library, tiny_dir, tmp_path
):
    corpus, out = tmp_path / "books.parquet", tmp_path / "run"
    books = library / "books"
    made = cli(
        "ingest",
        str(books / "novel.epub"),
        str(books / "pg.txt"),
        "--out",
        str(corpus),
        "--strip",
        "gutenberg",
    )
    assert made.returncode == 0, made.stderr
    scan = cli("scan", str(corpus), "--model", str(tiny_dir), "--out", str(out), *SCAN)
    assert scan.returncode == 0, scan.stderr
    docs = {r["doc_id"]: r for r in pq.read_table(corpus).to_pylist()}
    results = pq.read_table(out / "results").to_pylist()
    for row in results:  # char offsets index the ingested text
        assert row["text"] == docs[row["doc_id"]]["text"][row["char_start"] : row["char_end"]]
    flagged = [r for r in results if r["memorized"]]
    assert {r["doc_id"] for r in flagged} == {"novel.epub", "pg.txt"}, "both planted canaries found"
    epub_rows = [r for r in results if r["doc_id"] == "novel.epub" and r["target_tokens"]]
    assert {located(docs["novel.epub"], r) for r in flagged if r["doc_id"] == "novel.epub"} == {
        "EPUB/chap2.xhtml"
    }
    assert {located(docs["novel.epub"], r) for r in epub_rows} == {"EPUB/chap1.xhtml", "EPUB/chap2.xhtml"}
    assert all(located(docs["pg.txt"], r) for r in results if r["doc_id"] == "pg.txt")
    watch = cli("status", str(out), "--watch", "--interval", "0.1")
    assert watch.returncode == 0 and watch.stdout.count("phase: complete") == 1
    assert f"(memorized {len(flagged)}," in watch.stdout and "2/2 documents" in watch.stdout
