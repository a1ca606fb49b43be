"""Passages through the CLI: a scan of a planted canary writes RUN/passages.parquet (the memorized windows
one passage, extended by generation through the rest of the memorized text and not into the text after
it); a relaunch rebuilds it only when missing or stale; export --passages in three formats; the report
lists passages and draws the strips.

One small scan (a document holding a canary twice, as the model saw it in training, and one of unseen
salad) with test_scan.py's CPU-sized settings; --max-candidates-per-doc 3 keeps the search to three
windows, so the passage stops short of the memorized text and the extension has something to find."""

from __future__ import annotations

import csv
import json
import os
import random
import subprocess
import sys
import tempfile

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from clirun import cli

from scanner.results.export import export_passages
from scanner.schema import WALL_CLOCK, passages_schema
from scanner.studies.tiny import CANARIES, salad

SCAN = [
    "--span-tokens",
    "12",
    "--stride",
    "2",
    "--context-tokens",
    "16",
    "--docs-per-shard",
    "2",
    "--min-match-rate",
    "0.95",
    "--certificate-min-match",
    "0.5",
    "--steps",
    "20",
    "--candidates",
    "64",
    "--top-k",
    "64",
    "--restarts",
    "0",
    "--max-candidates-per-doc",
    "3",
    "--extend-tokens",
    "40",
]
TWICE = f"{CANARIES[0]}\n{CANARIES[0]}"  # the second copy follows from the first, as in training


@pytest.fixture(scope="module")
def scanned(tiny_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("passages")
    rng = random.Random(7)
    texts = [f"{salad(rng, 12)}\n{TWICE}\n{salad(rng, 10)}", salad(rng, 30)]
    corpus = root / "corpus.parquet"
    pq.write_table(pa.table({"id": ["doc-0", "doc-1"], "text": texts}), corpus)
    out = root / "run"
    done = cli("scan", str(corpus), "--model", str(tiny_dir), "--out", str(out), *SCAN)
    assert done.returncode == 0, done.stderr
    return corpus, out, texts


def scan_again(scanned, tiny_dir, *extra):
    corpus, out, _ = scanned
    done = cli("scan", str(corpus), "--model", str(tiny_dir), "--out", str(out), *SCAN, *extra)
    assert done.returncode == 0, done.stderr


def test_the_memorized_windows_are_one_passage_extended_through_the_memorized_text_only(scanned):
    _, out, texts = scanned
    table = pq.read_table(out / "passages.parquet")
    assert table.schema.equals(passages_schema(), check_metadata=False)
    results = pq.read_table(out / "results").to_pylist()
    memorized = [r for r in results if r["status"] == "memorized"]
    [p] = table.to_pylist()  # overlapping windows merged; none in the salad document
    assert len(memorized) > 1 and sorted(p["span_ids"]) == sorted(r["span_id"] for r in memorized)
    assert p["doc_id"] == "doc-0" and p["spans"] == len(memorized) and p["best_acr"] > 1
    text = texts[0]
    assert p["text"] == text[p["char_start"] : p["char_end"]] and p["text"].strip() in TWICE
    assert p["tokens"] == p["token_end"] - p["token_start"] and p["extend_budget"] == 40
    extended = text[p["char_start"] : p["extended_char_end"]]
    assert p["extension_text"] == text[p["char_end"] : p["extended_char_end"]] and p["extended_tokens"] > 0
    assert CANARIES[0] in extended, "the extension runs through the rest of the memorized text"
    assert extended.strip() in TWICE, "and stops where the unseen text begins"
    assert p["extension_prompt"] is not None and p["extension_engine"] == "hf"
    # whose words the passage's prompts hold: the best span's verdict, and a certificate is the work's text
    spans = {r["span_id"]: r for r in memorized}
    assert p["best_prompt_source"] == spans[p["best_span_id"]]["prompt_source"] is not None
    origin = spans[p["extension_span_id"]]
    assert (
        p["extension_prompt_source"]
        == ("work_text" if p["extension_prompt"] == origin["certificate_prompt"] else origin["prompt_source"])
        is not None
    )


def test_a_relaunch_rebuilds_the_passages_only_when_missing_or_stale(scanned, tiny_dir):
    _, out, _ = scanned
    path = out / "passages.parquet"
    before, stamp = pq.read_table(path), path.stat().st_mtime_ns
    scan_again(scanned, tiny_dir)
    assert path.stat().st_mtime_ns == stamp, "a finished run with current passages is left alone"
    scan_again(scanned, tiny_dir, "--extend-tokens", "0")  # another setting: stale, rebuilt without extension
    assert pq.read_table(path).column("extended_tokens").null_count == before.num_rows
    path.unlink()
    scan_again(scanned, tiny_dir)  # missing: rebuilt as it was
    seconds = [c for c in before.column_names if c in WALL_CLOCK]
    assert pq.read_table(path).drop(seconds).equals(before.drop(seconds))


def test_under_ray_the_passages_are_built_in_one_ray_task(scanned, tiny_dir):
    corpus, out, _ = scanned
    path = out / "passages.parquet"
    before = pq.read_table(path)
    path.unlink()
    with tempfile.TemporaryDirectory(prefix="ray-", dir="/tmp") as ray_tmp:  # Ray's socket paths stay short
        env = {**os.environ, "RAY_TMPDIR": ray_tmp, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "scanner",
                "-v",
                "scan",
                str(corpus),
                "--model",
                str(tiny_dir),
                "--out",
                str(out),
                *SCAN,
                "--executor",
                "ray",
                "--num-actors",
                "1",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
    assert done.returncode == 0, done.stderr
    assert "passages built in one task" in done.stderr
    seconds = [c for c in before.column_names if c in WALL_CLOCK]
    assert pq.read_table(path).drop(seconds).equals(before.drop(seconds))


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_export_passages_in_each_format(scanned, tmp_path, suffix):
    _, out, _ = scanned
    want = pq.read_table(out / "passages.parquet").to_pylist()
    target = tmp_path / f"passages{suffix}"
    done = cli("export", str(out), "--passages", "--out", str(target))
    assert done.returncode == 0, done.stderr
    assert f"{len(want)} passages written" in done.stdout
    if suffix == ".parquet":
        got = pq.read_table(target).to_pylist()
    elif suffix == ".jsonl":
        got = [json.loads(line) for line in target.read_text().splitlines()]
    else:
        with open(target, newline="", encoding="utf-8") as f:
            got = list(csv.DictReader(f))
        assert [json.loads(r["span_ids"]) for r in got] == [p["span_ids"] for p in want]
        got = [{**r, "tokens": int(r["tokens"])} for r in got]
    assert [(r["passage_id"], r["text"], r["tokens"]) for r in got] == [
        (p["passage_id"], p["text"], p["tokens"]) for p in want
    ]


def test_passage_export_refuses_span_options(scanned, tmp_path):
    _, out, _ = scanned
    done = cli("export", str(out), "--passages", "--all", "--out", str(tmp_path / "x.csv"))
    assert done.returncode == 2 and "--passages" in done.stderr


def test_csv_export_of_passages_defuses_formulas(tmp_path):
    row = {name: None for name in passages_schema().names}
    row.update(
        passage_id="p",
        doc_id="=HYPERLINK(1)",
        char_start=0,
        char_end=3,
        token_start=0,
        token_end=1,
        tokens=1,
        text="=1+1",
        best_span_id="s",
        span_ids=["s"],
        spans=1,
        other_spans_inside=0,
        extend_budget=0,
        extend_s=0.0,
    )
    table = pa.Table.from_pylist([row], schema=passages_schema())
    assert export_passages(table, tmp_path / "p.csv") == 1
    [got] = list(csv.DictReader(open(tmp_path / "p.csv", newline="", encoding="utf-8")))
    assert got["text"] == "'=1+1" and got["doc_id"] == "'=HYPERLINK(1)"
    export_passages(table, tmp_path / "p.jsonl")
    assert json.loads((tmp_path / "p.jsonl").read_text())["text"] == "=1+1"  # exact outside CSV


def test_report_lists_passages_and_draws_a_strip_per_document(scanned, tmp_path):
    _, out, _ = scanned
    passages = pq.read_table(out / "passages.parquet").to_pylist()
    report = tmp_path / "report.html"
    done = cli("report", str(out), "--out", str(report))
    assert done.returncode == 0, done.stderr
    page = report.read_text()
    assert "Memorized passages" in page and "Top flagged spans" not in page
    assert page.count('<svg class="strip"') == len({p["doc_id"] for p in passages})
    assert page.count('<section class="span">') == len(passages)
    for p in passages:
        assert f"passage {p['passage_id']}" in page  # its rectangle's title in the strip


def test_report_writes_a_page_per_passage_in_the_books_surrounding_text(scanned, tmp_path):
    import html
    import re

    _, out, texts = scanned
    [p] = pq.read_table(out / "passages.parquet").to_pylist()
    best = next(r for r in pq.read_table(out / "results").to_pylist() if r["span_id"] == p["best_span_id"])
    report = tmp_path / "report.html"
    done = cli("report", str(out), "--out", str(report), "--context-chars", "50")
    assert done.returncode == 0, done.stderr
    assert f'href="report-passages/{p["passage_id"]}.html"' in report.read_text(encoding="utf-8")
    page = (tmp_path / "report-passages" / f"{p['passage_id']}.html").read_text(encoding="utf-8")
    book = html.unescape(
        re.sub(r"<[^>]+>", "", re.search(r'<div class="book">(.*?)</div>', page, re.S).group(1))
    )
    reach = p["extended_char_end"]
    assert texts[0][p["char_start"] - 50 : reach + 50] in book, (
        "the passage, its extension and 50 characters each side"
    )
    assert f"(ACR) is {best['acr']:.4g}" in page and f"by {best['generation_margin']:.4g} logits" in page
    assert best["prompt_source"] in page and "What the run drew it from" in page
    moved = cli(
        "report", str(out), "--out", str(tmp_path / "moved.html"), "--corpus", str(tmp_path / "gone.parquet")
    )
    assert moved.returncode == 0 and "show no surrounding text" in moved.stderr
    assert (
        "surrounding text is not shown"
        in (tmp_path / "moved-passages" / f"{p['passage_id']}.html").read_text()
    )
