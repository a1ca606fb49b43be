"""Anchored spans (stages/anchor.py): runs of greedy matches and where spans go, then the scan's screen
over a planted corpus: memorized passages of 1, 1.5 and 2 spans at random offsets each get a whole
candidate span, where the fixed windows alone miss some."""

from __future__ import annotations

import random

import pytest

from scanner.config import CorpusConfig, ModelConfig, ScanConfig, SpanConfig
from scanner.errors import InputError
from scanner.run.shard import screen_document
from scanner.stages.anchor import anchor_starts, match_runs
from scanner.stages.read import Document
from scanner.stages.spans import tokenize_document
from scanner.studies.tiny import CANARIES, planted_document

SPAN = 10


def bits(text: str) -> list[bool]:
    return [c == "x" for c in text]


def test_runs_bridge_short_gaps_and_need_enough_matches():
    matched = bits("-xx-xxx--x")
    assert match_runs(matched, 2, 0) == [(1, 3), (4, 7)]
    assert match_runs(matched, 2, 1) == [(1, 7)]
    assert match_runs(matched, 6, 1) == []
    assert match_runs(bits("xxxx"), 4, 0) == [(0, 4)]  # a run reaching the document's end


def passage(n: int, start: int, length: int, first_matches: bool = False) -> list[bool]:
    """Matches of a memorized passage [start, start + length): its first token a miss unless told."""
    return [start + (0 if first_matches else 1) <= i < start + length for i in range(n)]


def test_anchors_hold_a_passage_at_any_offset():
    config = SpanConfig(span_tokens=8, anchor_min_run=6, anchor_max_gap=0)
    for start in range(0, 23):  # one span long: the span that starts at the passage is its only home
        assert start in anchor_starts(passage(30, start, 8), 8, config)
    assert anchor_starts(passage(30, 5, 8, first_matches=True), 8, config) == [4, 5]  # a cued first token
    assert anchor_starts(passage(30, 5, 12), 8, config) == [5, 6, 9]  # 1.5 spans: its start and its end
    assert anchor_starts(passage(30, 23, 7), 8, config) == [22]  # clamped inside the document
    assert anchor_starts(passage(30, 5, 6), 8, config) == []  # 5 matches: below the run threshold
    assert anchor_starts(passage(5, 0, 5), 8, config) == []  # a document shorter than a span


def test_anchor_settings_are_validated():
    assert SpanConfig(span_tokens=32).min_run == 28 and SpanConfig(span_tokens=3).min_run == 1
    with pytest.raises(InputError, match="--anchor-min-run 0"):
        SpanConfig(anchor_min_run=0)
    with pytest.raises(InputError, match="--anchor-max-gap -1"):
        SpanConfig(anchor_max_gap=-1)


def planted(tokenizer, copies: int = 2) -> tuple[list[str], list[tuple[int, int]]]:
    """Documents holding canary heads of 10, 15 and 20 tokens (1, 1.5 and 2 spans), each `copies` times,
    at random offsets in fresh salad; and each passage's token range."""
    rng, texts, where = random.Random(4), [], []
    for canary, tokens in ((CANARIES[2], SPAN), (CANARIES[3], 3 * SPAN // 2), (CANARIES[0], 2 * SPAN)):
        ids, offsets = tokenize_document(canary, tokenizer)
        head = canary[: offsets[tokens - 1][1]]
        for _ in range(copies):
            text, at = planted_document(rng, head, max_words=30)
            _, offsets = tokenize_document(text, tokenizer)
            first = next(t for t, (a, _) in enumerate(offsets) if a >= at)
            assert tokenize_document(text, tokenizer)[0][first : first + tokens] == ids[:tokens]
            texts.append(text)
            where.append((first, first + tokens))
    return texts, where


def inside(spans: list[tuple[int, int]], first: int, end: int) -> bool:
    return any(first <= a and b <= end for a, b in spans)


def test_screen_with_defaults_puts_a_candidate_inside_every_planted_passage(tiny_dir, engine):
    """What the scan's screen does (runner.screen_document, default windowing at a 10-token span):
    every passage holds a whole candidate span, which the search then takes; the fixed windows alone
    (the rows not anchored: a --no-anchors scan's) leave some passage without one."""
    texts, where = planted(engine.tokenizer)
    config = ScanConfig(
        corpus=CorpusConfig(path="planted.parquet"),
        model=ModelConfig(model=str(tiny_dir)),
        spans=SpanConfig(span_tokens=SPAN),
    )
    found, fixed, anchored, windows = [], [], 0, 0
    for i, (text, (first, end)) in enumerate(zip(texts, where, strict=True)):
        rows, chosen = screen_document(engine, Document(doc_id=f"d{i}", text=text), config, 0, "t")
        assert len(set(rows)) == len(rows) and [r["token_start"] for r in rows.values()] == sorted(
            r["token_start"] for r in rows.values()
        )  # anchored rows in document order, ids distinct
        picked = [s for s in chosen if rows[s.span_id]["greedy_match_rate"] >= 0.8]
        found.append(inside([(s.token_start, s.token_end) for s in picked], first, end))
        fixed.append(inside([(s.token_start, s.token_end) for s in picked if not s.anchored], first, end))
        anchored += sum(r["anchored"] for r in rows.values())
        windows += sum(not r["anchored"] for r in rows.values())
        assert all(r["pz_greedy"] in (0.0, 1.0) and r["np_discoverable"] is not None for r in rows.values())
    assert all(found), (
        f"passages without a whole candidate: {[w for w, f in zip(where, found, strict=True) if not f]}"
    )
    assert not all(fixed)
    assert 0 < anchored <= windows // 2  # anchors go where matches run, not everywhere


def test_a_scan_with_the_default_windowing_finds_every_planted_passage_whole(tiny_dir, engine, tmp_path):
    """The whole path, through the CLI with the default windowing (stride = span, anchors on): each
    planted passage of 1, 1.5 and 2 spans lies inside one memorized passage of passages.parquet (its
    token range whole), and no passage lies away from a planted one."""
    import subprocess
    import sys

    import pyarrow as pa
    import pyarrow.parquet as pq

    texts, where = planted(engine.tokenizer, copies=1)  # the screen test above takes two of each
    corpus = tmp_path / "planted.parquet"
    pq.write_table(pa.table({"id": [f"d{i}" for i in range(len(texts))], "text": texts}), corpus)
    args = [
        "scan",
        str(corpus),
        "--model",
        str(tiny_dir),
        "--out",
        str(tmp_path / "run"),
        "--span-tokens",
        str(SPAN),
        "--context-tokens",
        "16",
        "--steps",
        "30",
        "--candidates",
        "64",
        "--top-k",
        "64",
        "--restarts",
        "0",
        "--extend-tokens",
        "0",
        "--docs-per-shard",
        "3",
    ]
    done = subprocess.run(
        [sys.executable, "-m", "scanner", *args], capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr
    passages = pq.read_table(tmp_path / "run" / "passages.parquet").to_pylist()
    for i, (first, end) in enumerate(where):
        held = [
            p
            for p in passages
            if p["doc_id"] == f"d{i}" and p["token_start"] <= first and end <= p["token_end"]
        ]
        assert held, (
            f"d{i}: passage {first}-{end} not found whole in {[(p['doc_id'], p['token_start'], p['token_end']) for p in passages]}"
        )
    for p in passages:  # a passage may take a token or two the prompt cues before a planted one, no more
        first, end = where[int(p["doc_id"][1:])]
        assert first - 3 <= p["token_start"] and p["token_end"] <= end + 3, p
