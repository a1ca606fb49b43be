"""The page per flagged passage (scanner/results/report_pages.py): linked from the report and resolving to
files, holding the prompt, the ACR, the margins, the prompt's source and the run's denominators; corpus
markup shown as text; non-ASCII text and long lines kept whole; the book's text around the passage read
from a real Parquet corpus (stages/surroundings.py), and refused where the corpus no longer holds it."""

from __future__ import annotations

import html
import re
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from scanner.config import CorpusConfig
from scanner.results.html_format import page_name
from scanner.results.report import write_report
from scanner.results.report_pages import MARKER, findings, write_pages
from scanner.schema import passages_schema
from scanner.stages.read import open_corpus
from scanner.stages.surroundings import Wanted, surroundings, window
from scanner.storage.rundir import Plan
from tests.test_report import make_row, passage_row, table_of

EVIL = "<script>alert(1)</script>"
GREEK = "μῆνιν ἄειδε θεὰ Πηληϊάδεω Ἀχιλῆος"
CJK = "東京の夜は静かだった。"
LONG = "x" * 3000  # one unbroken line, wider than any window
BEFORE = f"Chapter one. Les élèves arrivèrent à l'école. <b>bold</b> {EVIL} "
PASSAGE = f"{GREEK} {CJK} {LONG}"
AFTER = " And then the unseen text goes on, café, naïve."
BOOK = BEFORE + PASSAGE + AFTER
START, END = len(BEFORE), len(BEFORE) + len(PASSAGE)


def run_tables() -> tuple[pa.Table, pa.Table]:
    """A memorized passage of two spans holding markup, Greek, Japanese and a 3,000-character line; the best
    span's prompt holds markup too and its generation is fragile."""
    mid = START + len(GREEK) + 1
    best = make_row(
        EVIL,
        1,
        "memorized",
        doc_row="c.parquet:0",
        char_start=START,
        char_end=mid,
        text=BOOK[START:mid],
        acr=3.5,
        prompt=f"say {EVIL} é",
        prompt_tokens=4,
        target_tokens=14,
        generation_margin=0.25,
        generation_margin_at=6,
        fragile_below=1.0,
        fragile=True,
        prompt_source="free",
        prompt_doc_run_tokens=2,
        prompt_span_run_tokens=1,
    )
    other = make_row(
        EVIL,
        2,
        "memorized",
        doc_row="c.parquet:0",
        char_start=mid,
        char_end=END,
        text=BOOK[mid:END],
        acr=2.0,
        generation_margin=4.0,
        generation_margin_at=0,
        fragile_below=1.0,
        fragile=False,
        prompt_source="work_text",
        prompt_doc_run_tokens=9,
    )
    results = table_of(
        [
            best,
            other,
            make_row(EVIL, 3, "not_searched", doc_row="c.parquet:0"),
            make_row("plain", 0, "screened_out"),
        ]
    )
    passage = passage_row(
        EVIL,
        START,
        END,
        doc_id=EVIL,
        doc_row="c.parquet:0",
        text=PASSAGE,
        best_acr=3.5,
        best_prompt=best["prompt"],
        best_span_id=best["span_id"],
        span_ids=[best["span_id"], other["span_id"]],
        spans=2,
        extended_tokens=0,
        extended_char_end=END,
        extension_text="",
        best_prompt_source="free",
    )
    return results, pa.Table.from_pylist([passage], schema=passages_schema())


def hrefs(page: str) -> list[str]:
    return [unquote(html.unescape(h)) for h in re.findall(r'href="([^"]+)"', page)]


@pytest.fixture
def written(tmp_path):
    results, passages = run_tables()
    [finding] = findings(results, passages)
    context = {
        finding.page: window(BOOK, Wanted(finding.page, "c.parquet:0", 0, START, END, PASSAGE, END), 60)
    }
    out = write_report(
        results, {"model": "tiny"}, tmp_path / "report.html", passages, context, work_text_tokens=4
    )
    return out, finding


def test_every_link_of_the_report_resolves_to_a_page_and_back(written):
    out, finding = written
    report = out.read_text(encoding="utf-8")
    links = [h for h in hrefs(report) if h.endswith(".html")]
    assert links == [f"report-passages/{finding.page}.html"]
    page_path = out.parent / links[0]
    assert page_path.is_file() and sorted(p.name for p in out.parent.iterdir()) == [
        "report-passages",
        "report.html",
    ]
    page = page_path.read_text(encoding="utf-8")
    assert (page_path.parent / hrefs(page)[0]).resolve() == out.resolve()


def test_the_page_holds_prompt_acr_margin_source_and_denominators(written):
    out, finding = written
    page = (out.parent / "report-passages" / f"{finding.page}.html").read_text(encoding="utf-8")
    assert f'<div class="prompt">say {html.escape(EVIL)} é</div>' in page
    assert "(ACR) is 3.5" in page and "4 tokens" in page
    assert "by 0.25 logits" in page and "<b>fragile</b>" in page and "word piece 7 of 14" in page
    assert "generation margin 0.25 at token 6, fragile (below 1" in page
    assert "weakest margin is 0.25" in page and "1 fragile" in page  # over the passage's two spans
    assert "<b>free of the book's text</b>" in page and "shares with the document is 2 tokens" in page
    assert "counts 4 or more as the work's own text" in page  # k = 4
    drawn = dict(re.findall(r"<dt>([^<]+)</dt><dd>([^<]+)</dd>", page.split("What the run drew it from")[1]))
    assert (drawn["documents"], drawn["memorized"], drawn["not searched (budget)"]) == ("2", "2", "1")
    assert '<td class="text same">' in page and "(not stored)" in page  # output beside the book


def test_markup_in_the_corpus_is_text_and_unicode_and_long_lines_survive(written):
    out, finding = written
    raw = (out.parent / "report-passages" / f"{finding.page}.html").read_bytes()
    page = raw.decode("utf-8")
    assert '<meta charset="utf-8">' in page
    assert "<script" not in page.lower() and "<b>bold</b>" not in page
    assert html.escape(EVIL) in page and "&lt;b&gt;bold&lt;/b&gt;" in page
    assert GREEK in page and CJK in page and "élèves" not in page  # the window is 60 characters each side
    assert html.escape(BOOK[START - 60 : START]) in page and "l&#x27;école" in page and "café, naïve" in page
    assert LONG in page and re.search(r"\.book,[^{]*\{white-space:pre-wrap;overflow-wrap:anywhere", page)
    assert "table-layout:fixed" in page


def test_the_window_is_refused_where_the_document_no_longer_holds_the_passage():
    wanted = Wanted("p", "k", 0, START, END, PASSAGE, END)
    cut = window(BOOK, wanted, 10)
    assert cut == {"text": BOOK[START - 10 : END + 10], "offset": START - 10, "doc_chars": len(BOOK)}
    assert window("edited " + BOOK, wanted, 10) is None


def test_surroundings_read_from_a_parquet_corpus_shard_by_shard(tmp_path):
    texts = ["first document", BOOK, "third", "fourth <i>"]
    pq.write_table(pa.table({"id": ["a", "b", "c", "d"], "text": texts}), tmp_path / "c.parquet")
    corpus = open_corpus(CorpusConfig(path=str(tmp_path / "c.parquet")))
    plan = Plan.make(4, 2)  # shard 0: a, b; shard 1: c, d
    wanted = [
        Wanted("p", "c.parquet:1", 0, START, END, PASSAGE, END),
        Wanted("q", "d", 1, 0, 6, "fourth", 6),  # keyed by doc_id (results without doc_row)
        Wanted("gone", "c.parquet:2", 1, 0, 5, "thirx", 5),
    ]
    found = surroundings(corpus, plan, wanted, chars=5)
    assert sorted(found) == ["p", "q"]
    assert found["p"]["text"] == BOOK[START - 5 : END + 5] and found["q"] == {
        "text": "fourth <i>",
        "offset": 0,
        "doc_chars": 10,
    }


def test_pages_without_surroundings_say_so_and_runs_without_passages_get_span_pages(tmp_path):
    results, _ = run_tables()
    out = write_report(results, {}, tmp_path / "r #1 é.html")  # '#' would cut a raw link into a fragment
    assert '<a href="r%20%231%20%C3%A9-passages/span-' in out.read_text(encoding="utf-8")
    pages = sorted((tmp_path / "r #1 é-passages").glob("*.html"))  # beside them: the folder's marker
    assert [p.name for p in pages] == sorted(
        f"span-{r['span_id']}.html" for r in results.to_pylist() if r["status"] == "memorized"
    )
    page = pages[0].read_text(encoding="utf-8")
    assert "surrounding text is not shown" in page and "not checked" in page
    assert all(
        (out.parent / h).is_file() for h in hrefs(out.read_text(encoding="utf-8")) if h.endswith(".html")
    )


def test_page_names_are_safe_and_a_failed_write_keeps_the_old_pages(tmp_path):
    assert page_name("0123abcd") == "0123abcd" and re.fullmatch(r"id-[0-9a-f]{16}", page_name("../../etc"))
    folder = tmp_path / "r-passages"
    assert write_pages(folder, [("a", "old")], lambda: None) == 1

    def fail():
        raise OSError("disk full")

    with pytest.raises(OSError):
        write_pages(folder, [("b", "new")], fail)
    assert (
        sorted(p.name for p in tmp_path.iterdir()) == ["r-passages"]
        and (folder / "a.html").read_text() == "old"
    )
    assert write_pages(folder, [("b", "new")], lambda: None) == 1
    assert sorted(Path(p).name for p in folder.iterdir()) == [MARKER, "b.html"]  # stale pages go
