"""HTML report: untrusted text is escaped everywhere, per-document figures on a crafted table, the histogram,
pages for tables with nothing searched or nothing at all, and on a real scan of 200 documents a row and a
strip only for those with findings, the rest summarized in a section whose size barely grows with them."""

from __future__ import annotations

import html
import re
from collections import Counter
from html.parser import HTMLParser

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from scanner.errors import InputError
from scanner.results.report import MAX_BINS, histogram, render_report, top_spans, write_report
from scanner.results.report_documents import document_stats, longest_run
from scanner.schema import default_row, results_schema

EVIL = "<script>alert(1)</script>"
SUMMARY = {
    "model": "tiny-llama",
    "corpus": "books.parquet",
    "spans": 9,
    "shards": 2,
    "rows by status": {"memorized": 3, "not_memorized": 2},
    "memorized": 3,
    "average ACR": 1.4567,
    "wall time (s)": 1234.5,
}


def make_row(doc_id: str, index: int, status: str = "not_memorized", **values) -> dict:
    """A complete results row; `values` override the defaults."""
    searched = status in ("memorized", "not_memorized")
    row = {
        **default_row(),  # the schema's defaults: a column added there needs no change here
        "doc_id": doc_id,
        "span_id": f"{index:016x}",
        "char_start": 100 * index,
        "char_end": 100 * index + 90,
        "token_start": 32 * index,
        "token_end": 32 * index + 32,
        "text": f"text of {doc_id} span {index}",
        "target_tokens": 32,
        "target_ids": list(range(32)),
        "status": status,
        "reason": None,
        "acr": 0.2 if searched else None,
        "memorized": status == "memorized",
        "prompt": "a prompt" if status == "memorized" else None,
        "prompt_ids": None,
        "prompt_tokens": 2 if status == "memorized" else None,
        "tau": 1.0,
        "thresholds": [{"name": "tau", "tau": 1.0, "memorized": status == "memorized"}] if searched else [],
        "greedy_match_rate": 0.25,
        "mean_nll": 2.5,
        "discoverable": None,
        "certificate_tokens": None,
        "certificate_prompt": None,
        "verified_generation": status == "memorized",
        "teacher_forced": None,
        "verify_engine": "hf" if status == "memorized" else None,
        "min_margin": None,
        "steps": 100 if searched else 0,
        "forwards": 500,
        "screen_s": 0.01,
        "search_s": 1.0,
        "shard": 0,
    }
    row.update(values)
    return row


def table_of(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=results_schema())


def crafted() -> pa.Table:
    """Doc "x": memorized at token order 1, 2, 4, 5, 6 (a run of 3); rows stored out of order on purpose.
    Doc "y": one not memorized, one screened out. Doc "z": only skipped. Fragile: one memorized span of x,
    one not memorized (not counted)."""
    pattern = {
        0: "not_memorized",
        1: "memorized",
        2: "memorized",
        3: "not_memorized",
        4: "memorized",
        5: "memorized",
        6: "memorized",
        7: "screened_out",
    }
    x = [
        make_row(
            "x",
            i,
            status,
            acr=(2.0 + i if status == "memorized" else 0.5 if status != "screened_out" else None),
            fragile=i in (3, 4),
        )
        for i, status in pattern.items()
    ]
    x = x[4:] + x[:4]  # shards of one document may land in any order
    return table_of(
        x
        + [
            make_row("y", 0, acr=0.9),
            make_row("y", 1, "screened_out"),
            make_row("z", 0, "skipped", reason="too short", text="", target_tokens=0),
        ]
    )


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ([], 0),
        ([False], 0),
        ([True], 1),
        ([True, True, False, True], 2),
        ([False, True, True, True], 3),
    ],
)
def test_longest_run(flags, expected):
    assert longest_run(flags) == expected


@given(st.lists(st.booleans()))
def test_longest_run_matches_the_longest_block_of_ones(flags):
    text = "".join("1" if f else "0" for f in flags)
    assert longest_run(flags) == max((len(block) for block in text.split("0")), default=0)


def figures(d) -> tuple:
    return d.spans, d.memorized, d.longest_run, d.top_acr, d.failed, d.tokens, d.has_findings


def test_document_stats_on_a_crafted_table():
    stats = {d.doc_id: d for d in document_stats(crafted())}
    assert figures(stats["x"]) == (8, 5, 3, 8.0, 0, 32 * 7 + 32, True)
    assert stats["x"].share == 5 / 8
    assert figures(stats["y"]) == (2, 0, 0, 0.9, 0, 64, False)
    assert figures(stats["z"]) == (1, 0, 0, None, 0, 32, False)


def cells(page: str, table: str = "documents") -> list[list[str]]:
    """The rows of the table of that class (documents: those with findings; closest) as cell texts."""

    class Cells(HTMLParser):
        def __init__(self):
            super().__init__()
            self.rows, self.cell, self.inside = [], None, False

        def handle_starttag(self, tag, attrs):
            if tag == "table":
                self.inside = dict(attrs).get("class") == table
            elif tag == "tr" and self.inside:
                self.rows.append([])
            elif tag == "td" and self.inside:
                self.cell = ""

        def handle_data(self, data):
            if self.cell is not None:
                self.cell += data

        def handle_endtag(self, tag):
            if tag == "td" and self.cell is not None:
                self.rows[-1].append(self.cell.strip())
                self.cell = None
            elif tag == "table":
                self.inside = False

    parser = Cells()
    parser.feed(page)
    return [row for row in parser.rows if row]


def quiet_ids(page: str) -> list[str]:
    """The ids in the collapsed list of documents without findings."""
    found = re.search(r'<details class="quiet">.*?<ol class="ids">(.*?)</ol></details>', page, re.S)
    return [html.unescape(i) for i in re.findall(r"<li>(.*?)</li>", found.group(1))] if found else []


def test_page_shows_the_per_document_figures_of_documents_with_findings_only():
    page = render_report(crafted(), SUMMARY)
    assert cells(page) == [["x", "8", "5", "62%", "3", "8", "0", "1"]]
    assert quiet_ids(page) == ["y", "z"]
    assert (
        "2 documents without a memorized span, a passage or a failed span: 96 tokens as far as their "
        "spans reach, 3 spans: 1 not memorized, 1 screened out, 1 skipped."
    ) in page
    assert cells(page, "closest") == [["y", "2", "0.25", "0.9"], ["z", "1", "0.25", "–"]]


def test_the_closest_table_says_which_documents_it_ranks_against_the_count_above_it():
    """Two documents without findings over a table of one: the caption says the other had no span the
    screen scored, so the count and the table do not disagree."""
    rows = [r if r["doc_id"] != "z" else {**r, "greedy_match_rate": None} for r in crafted().to_pylist()]
    page = render_report(table_of(rows), SUMMARY)
    assert "2 documents without a memorized span" in page
    assert cells(page, "closest") == [["y", "2", "0.25", "0.9"]]
    assert (
        "The 1 document closest to being flagged, of the 1 whose spans the screen scored (1 had no span "
        "the screen scored)"
    ) in page


def test_a_passage_failure_or_calibrated_flag_alone_is_a_finding():
    from scanner.schema import passages_schema

    rows = [
        make_row("p", 0, doc_row="f:p"),
        make_row("f", 0, "failed", reason="boom", doc_row="f:f"),
        make_row("c", 0, calibrated_memorized=True, doc_row="f:c"),
        make_row("q", 0, doc_row="f:q"),
        make_row("p", 1, doc_row="f:other"),
    ]  # another corpus row sharing the id "p": no passage
    passages = pa.Table.from_pylist([passage_row("p", 0, 90)], schema=passages_schema())
    page = render_report(table_of(rows), SUMMARY, passages)
    assert sorted(r[0] for r in cells(page)) == ["c", "f", "p"]
    assert quiet_ids(page) == ["q", "p"]


def test_summary_keys_and_values_are_listed():
    page = render_report(crafted(), SUMMARY)
    for key in ("model", "corpus", "rows by status", "wall time (s)"):
        assert f"<dt>{key}</dt>" in page
    assert "<dd>tiny-llama</dd>" in page and "memorized: 3, not_memorized: 2" in page
    assert "<dd>1.457</dd>" in page and "<dd>1,234.5</dd>" in page
    assert "<title>ACR scan report · tiny-llama</title>" in page


def test_histogram_is_inline_svg_with_a_tau_line():
    page = render_report(crafted(), SUMMARY)
    svg = re.search(r"<svg.*?</svg>", page, re.S).group(0)
    assert svg.count("<rect") >= 2 and 'class="tau"' in svg and "τ = 1" in svg
    assert "http" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "<script" not in page and "<link" not in page and "src=" not in page


def test_histogram_bins():
    h = histogram([(0.3, False), (1.0, False), (1.5, True), (6.0, True), (None, False), (float("inf"), True)])
    assert h.edges[0] == 0 and h.edges[-1] >= 6.0 and len(h.edges) - 1 <= MAX_BINS
    assert sum(h.memorized) == 2 and sum(h.not_memorized) == 2
    step = h.edges[1]
    assert 1.0 in h.edges  # τ = 1 falls on an edge, so no bar straddles it
    assert h.not_memorized[round(0.3 / step)] == 1 and h.memorized[-1] == 1
    assert histogram([]) is None and histogram([(None, True)]) is None


def test_top_spans_highest_acr_first_and_capped():
    rows = [make_row("d", i, "memorized", acr=float(i % 7) + 1.5) for i in range(60)]
    top = top_spans(table_of(rows))
    assert len(top) == 50
    assert [r["acr"] for r in top] == sorted((r["acr"] for r in rows), reverse=True)[:50]


def evil_table() -> pa.Table:
    return table_of(
        [
            make_row(EVIL, 0, "memorized", text=f"before {EVIL} after", prompt=f"say {EVIL}", acr=16.0),
            make_row(EVIL, 1, "not_memorized", text=EVIL),
            make_row("plain & simple", 0, "memorized", prompt="", prompt_tokens=0, acr=32.0),
        ]
    )


def test_script_in_text_prompt_and_doc_id_is_escaped():
    page = render_report(evil_table(), {"model": EVIL, "corpus": {"path": EVIL}})
    assert "<script" not in page.lower()
    escaped = html.escape(EVIL)
    assert f"<pre>before {escaped} after</pre>" in page
    assert f"<pre>say {escaped}</pre>" in page
    assert f'<td class="doc">{escaped}</td>' in page
    assert page.count(escaped) >= 6  # title, summary twice, heading, table, text, prompt
    assert "plain &amp; simple" in page and "Empty prompt" in page


def test_empty_table_still_renders():
    page = render_report(table_of([]), {})
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "No decided spans" in page and "No rows" in page and "No span was flagged" in page
    assert "No run summary given" in page and "<svg" not in page


def test_table_without_searched_spans_still_renders():
    rows = [
        make_row("a", 0, "screened_out"),
        make_row("a", 1, "skipped", reason="too short"),
        make_row("a", 2, "failed", reason="boom"),
    ]
    page = render_report(table_of(rows), SUMMARY)
    assert "No decided spans" in page and cells(page) == [["a", "3", "0", "0%", "0", "–", "1", "0"]]
    assert "without findings" not in page
    assert "1 screened out, 1 skipped, 1 failed. Skipped: too short (1)." in page, "a skip says why"


def test_missing_column_is_a_user_error():
    with pytest.raises(InputError, match="prompt_tokens"):
        render_report(crafted().drop_columns(["prompt_tokens"]), SUMMARY)


def test_write_report_is_atomic(tmp_path, monkeypatch):
    out = write_report(crafted(), SUMMARY, tmp_path / "sub" / "report.html")
    assert out.read_text(encoding="utf-8") == render_report(crafted(), SUMMARY, pages="report-passages")
    # a page per flagged span beside it (no passages table), and no temporary folder left
    assert sorted(p.name for p in out.parent.iterdir()) == ["report-passages", "report.html"]
    assert len(list((out.parent / "report-passages").glob("*.html"))) == 5
    (tmp_path / "taken.html").mkdir()  # a folder as --out is refused up front, naming it (not a temp file)
    with pytest.raises(InputError, match="taken.html is a folder; name the HTML file"):
        write_report(crafted(), SUMMARY, tmp_path / "taken.html")

    def full(path, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("scanner.results.report.atomic_write_bytes", full)  # the report's own write fails
    with pytest.raises(OSError):
        write_report(crafted(), SUMMARY, tmp_path / "new.html")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sub", "taken.html"]


def passage_row(doc: str, start: int, end: int, **values) -> dict:
    """A complete passages row (scanner/schema.py passages_schema); `values` override the defaults."""
    row = {
        "passage_id": f"p{doc}{start}",
        "doc_id": doc,
        "doc_row": f"f:{doc}",
        "char_start": start,
        "char_end": end,
        "token_start": start // 4,
        "token_end": end // 4,
        "tokens": (end - start) // 4,
        "text": f"passage of {doc}",
        "best_acr": 2.5,
        "best_acr_kind": None,
        "best_prompt": "a prompt",
        "best_prompt_tokens": 3,
        "best_span_id": "s",
        "span_ids": ["s"],
        "spans": 1,
        "other_spans_inside": 0,
        "calibrated_spans": 1,
        "extend_budget": 128,
        "extended_token_end": end // 4 + 5,
        "extended_char_end": end + 20,
        "extended_tokens": 5,
        "extended_chars": 20,
        "extension_text": "more",
        "extension_prompt": "a prompt",
        "extension_span_id": "s",
        "extension_engine": "hf",
        "extend_s": 0.1,
    }
    row.update(values)
    return row


def test_passages_replace_the_spans_with_one_strip_per_document():
    from scanner.schema import passages_schema

    results = table_of(
        [make_row("x", i, "memorized", doc_row="f:x") for i in range(4)]
        + [make_row("y", i, doc_row="f:y") for i in range(2)]
    )
    passages = pa.Table.from_pylist(
        [
            passage_row("x", 0, 100),
            passage_row("x", 200, 290, extended_tokens=0, extended_char_end=290),
            passage_row("z", 0, 40, text=EVIL, doc_id=EVIL, extension_text=EVIL),
        ],
        schema=passages_schema(),
    )
    page = render_report(results, SUMMARY, passages)
    assert "Top flagged spans" not in page and "Memorized passages" in page
    assert page.count('<svg class="strip"') == 2 and page.count('<section class="span">') == 3
    strip = page.split('<svg class="strip"')[1].split("</svg>")[0]
    # doc x: 390 characters (its spans' last char_end); passage 0-100 and its extension 100-120 drawn.
    assert 'x="0.0" y="0" width="256.4"' in strip and 'x="256.4" y="0" width="51.3"' in strip
    assert strip.count("<rect") == 1 + 2 + 1  # the document, two passages, one extension
    assert EVIL not in page and html.escape(EVIL) in page
    assert "+5 tokens" in page and "reproduced nothing more" in page


QUIET_DOCS = 199


@pytest.fixture(scope="module")
def library(tiny_dir, tmp_path_factory):
    """A real scan of 200 short documents: one holds a canary the tiny model memorized, 199 are unseen
    word salad; a strict screen keeps the search to the canary's windows (about 4 s on 2 cores)."""
    import random

    import pyarrow.parquet as pq

    from scanner.cli.output import run_summary
    from scanner.config import (
        CorpusConfig,
        GCGConfig,
        ModelConfig,
        ScanConfig,
        ScreenConfig,
        SearchConfig,
        SpanConfig,
    )
    from scanner.run.driver import run_scan
    from scanner.storage.passages import read_passages
    from scanner.storage.rundir import RunDir
    from scanner.studies.tiny import CANARIES, salad

    root = tmp_path_factory.mktemp("library")
    rng = random.Random(3)
    texts = [f"{salad(rng, 4)} {CANARIES[0]}"] + [salad(rng, 6) for _ in range(QUIET_DOCS)]
    pq.write_table(
        pa.table({"id": [f"doc-{i}" for i in range(len(texts))], "text": texts}), root / "c.parquet"
    )
    search = SearchConfig(
        decide_steps=20, shrink_steps=10, restarts=0, gcg=GCGConfig(top_k=64, num_candidates=64, patience=40)
    )
    config = ScanConfig(
        corpus=CorpusConfig(path=str(root / "c.parquet")),
        model=ModelConfig(model=str(tiny_dir), device="cpu"),
        spans=SpanConfig(span_tokens=12, stride=6),
        screen=ScreenConfig(context_tokens=16),
        search=search,
        min_match_rate=0.95,
        docs_per_shard=len(texts),
    )
    run_scan(config, str(root / "run"))
    run = RunDir(root / "run")
    return run.read_results(), read_passages(run), run_summary(run)


def findings_of(results: pa.Table, passages: pa.Table) -> set[str]:
    """Documents with a finding, read straight off the tables (report_documents.py's definition)."""
    rows = results.to_pylist()
    return {
        r["doc_id"] for r in rows if r["status"] in ("memorized", "failed") or r["calibrated_memorized"]
    } | set(passages["doc_id"].to_pylist())


def test_a_library_run_gives_rows_and_strips_to_documents_with_findings_only(library):
    results, passages, summary = library
    found = findings_of(results, passages)
    page = render_report(results, summary, passages)
    assert "doc-0" in found and len(found) < 5, "the canary's document, and little else, has findings"
    assert {r[0] for r in cells(page)} == found
    strips = re.findall(r'<div class="strip-row"><p class="meta"><b>(.*?)</b>', page)
    assert set(strips) == set(passages["doc_id"].to_pylist()) <= found
    listed = quiet_ids(page)
    every = list(dict.fromkeys(results["doc_id"].to_pylist()))
    assert len(every) == QUIET_DOCS + 1 and sorted(listed + sorted(found)) == sorted(every), "each once"
    quiet = results.filter(pa.array([d not in found for d in results["doc_id"].to_pylist()]))
    stated = re.search(
        r"([\d,]+) documents without a memorized span, a passage or a failed span: ([\d,]+) tokens "
        r"as far as their spans reach, ([\d,]+) spans: (.*?)\.</p>",
        page,
    )
    assert int(stated[1]) == len(listed) and int(stated[3].replace(",", "")) == quiet.num_rows
    by_status = {s: int(n.replace(",", "")) for n, s in (f.split(" ", 1) for f in stated[4].split(", "))}
    assert by_status == {s.replace("_", " "): n for s, n in Counter(quiet["status"].to_pylist()).items()}
    closest = cells(page, "closest")
    assert len(closest) == 5 and {r[0] for r in closest} <= set(listed)
    assert float(closest[0][2]) == pytest.approx(pa.compute.max(quiet["greedy_match_rate"]).as_py(), abs=1e-4)


def test_the_page_grows_with_findings_not_with_documents(library):
    results, passages, summary = library
    found = findings_of(results, passages)
    page = render_report(results, summary, passages)
    alone = render_report(
        results.filter(pa.array([d in found for d in results["doc_id"].to_pylist()])), summary, passages
    )
    per_quiet_doc = (len(page) - len(alone)) / QUIET_DOCS
    strip = re.search(r'<div class="strip-row">.*?</div>', page, re.S).group(0)
    row = re.search(r'<table class="documents">.*?(<tr><td.*?</tr>)', page, re.S).group(1)
    # A document without findings costs its id in the collapsed list, not a strip and a row of its own.
    assert per_quiet_doc < 40 and per_quiet_doc * 10 < len(strip) + len(row), (
        per_quiet_doc,
        len(strip),
        len(row),
    )


def test_the_page_lists_the_denominators_and_whose_words_each_prompt_holds():
    attempt = {
        "stage": "search",
        "length": 2,
        "trial": 0,
        "tries": 1,
        "warm": "random",
        "seed": 1,
        "max_steps": 9,
        "steps": 9,
        "best_loss": 0.1,
        "best_right": 30,
        "outcome": "failed",
        "stop_reason": None,
    }
    table = table_of(
        [
            make_row(
                "d",
                0,
                "memorized",
                acr=9.0,
                prompt_source="free",
                prompt_doc_run_tokens=1,
                attempts=[attempt, {**attempt, "length": 3, "outcome": "success"}],
            ),
            make_row("d", 1, "memorized", acr=8.0, prompt_source="work_text", prompt_doc_run_tokens=7),
            make_row("d", 2, "not_searched"),
            make_row("e", 0, "screened_out"),
        ]
    )
    page = render_report(table, {})
    drawn = dict(
        re.findall(r"<dt>([^<]+)</dt><dd>([^<]+)</dd>", page.split("What the hits were drawn from")[1])
    )
    assert (drawn["documents"], drawn["candidates (passed the screen)"], drawn["not searched (budget)"]) == (
        "2",
        "3",
        "1",
    )
    assert drawn["memorized, prompt free of the work&#x27;s text"] == "1"
    assert drawn["attempts (prompt lengths tried, failures included)"] == "2"
    assert "prompt (free of the work&#x27;s text, longest run shared with the document 1 tokens)" in page
    assert "prompt (holds the work&#x27;s text, longest run shared with the document 7 tokens)" in page
    assert "2 attempts (1 without success)" in page


def test_a_prompt_of_whitespace_only_is_spelled_out():
    rows = [make_row("a", 0, "memorized", prompt="\n"), make_row("a", 1, "memorized", prompt="go")]
    page = render_report(table_of(rows), SUMMARY)
    assert "A prompt of whitespace only: &#x27;\\n&#x27;." in page and "<pre>go</pre>" in page
    assert "whitespace only" not in render_report(table_of(rows[1:]), SUMMARY)
