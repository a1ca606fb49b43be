"""Passages (scanner/measures/passages.py): the merge of memorized spans, its invariants under hypothesis, and the
passage rows; no model."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scanner.measures.passages import (
    find_passages,
    merge_runs,
    passage_id,
    passage_rows,
    stitched_text,
    verified_run,
)
from scanner.schema import passages_schema

STATUSES = ("memorized", "not_memorized", "screened_out")


def _row(
    doc_row: str, start: int, end: int, status: str, acr: float | None = None, doc_id: str = "d"
) -> dict:
    text = "".join(f"t{i} " for i in range(200))  # token i = characters [3i, 3i + 3) (for i < 10)
    return {
        "doc_id": doc_id,
        "doc_row": doc_row,
        "span_id": f"{doc_row}/{start}/{end}",
        "token_start": start,
        "token_end": end,
        "char_start": 3 * start,
        "char_end": 3 * end,
        "text": text[3 * start : 3 * end],
        "target_tokens": end - start,
        "status": status,
        "acr": acr,
        "prompt": f"p{start}",
        "prompt_tokens": 2,
        "certificate_prompt": None,
        "shard": 0,
    }


@st.composite
def documents(draw):
    """Rows of up to three documents (two share a doc_id): spans of random ranges and statuses."""
    rows = []
    for doc in range(draw(st.integers(1, 3))):
        for _ in range(draw(st.integers(0, 12))):
            start = draw(st.integers(0, 60))
            end = start + draw(st.integers(1, 12))
            rows.append(
                _row(
                    f"f:{doc}",
                    start,
                    end,
                    draw(st.sampled_from(STATUSES)),
                    draw(st.floats(0.5, 4)),
                    doc_id="same" if doc < 2 else "other",
                )
            )
    return [dict(r, span_id=f"{r['span_id']}#{i}") for i, r in enumerate(rows)]


def _covered(ranges) -> set[int]:
    return {t for start, end in ranges for t in range(start, end)}


@settings(max_examples=100, deadline=None)
@given(documents())
def test_passages_are_maximal_disjoint_and_cover_exactly_the_memorized_spans(rows):
    passages = find_passages(rows)
    for doc in {r["doc_row"] for r in rows}:
        mine = [p for p in passages if p.key == doc]
        memorized = [r for r in rows if r["doc_row"] == doc and r["status"] == "memorized"]
        # Disjoint and not even adjacent: a gap of at least one token between passages (maximality).
        for a, b in zip(mine, mine[1:], strict=False):
            assert a.token_end < b.token_start
        # Exactly the union of the memorized spans, and no token of a passage outside its spans.
        assert _covered((p.token_start, p.token_end) for p in mine) == _covered(
            (r["token_start"], r["token_end"]) for r in memorized
        )
        for p in mine:
            assert _covered((s["token_start"], s["token_end"]) for s in p.spans) == set(
                range(p.token_start, p.token_end)
            )
            assert p.token_start == min(s["token_start"] for s in p.spans)
            assert p.token_end == max(s["token_end"] for s in p.spans)
            assert all(s["doc_row"] == doc for s in p.spans)
        # Every memorized span in exactly one passage; nothing else in any.
        ids = [i for p in mine for i in p.span_ids]
        assert sorted(ids) == sorted(r["span_id"] for r in memorized)
        # A span that is not memorized lies inside a passage only where memorized spans cover it whole.
        for r in rows:
            if r["doc_row"] == doc and r["status"] != "memorized":
                holders = [
                    p for p in mine if p.token_start <= r["token_start"] and r["token_end"] <= p.token_end
                ]
                if holders:
                    assert set(range(r["token_start"], r["token_end"])) <= _covered(
                        (s["token_start"], s["token_end"]) for s in holders[0].spans
                    )


@settings(max_examples=50, deadline=None)
@given(documents(), st.randoms(use_true_random=False))
def test_the_merge_does_not_depend_on_row_order_and_ids_are_unique(rows, rng):
    shuffled = list(rows)
    rng.shuffle(shuffled)
    got, want = passage_rows(shuffled, "tok"), passage_rows(rows, "tok")
    assert sorted(got, key=lambda r: r["passage_id"]) == sorted(want, key=lambda r: r["passage_id"])
    assert len({r["passage_id"] for r in want}) == len(want)
    pa.Table.from_pylist(want, schema=passages_schema())  # every row fits the schema


def test_overlapping_and_adjacent_spans_merge_and_a_gap_splits():
    spans = [
        _row("f:0", 0, 4, "memorized"),
        _row("f:0", 2, 6, "memorized"),
        _row("f:0", 6, 9, "memorized"),
        _row("f:0", 10, 12, "memorized"),
    ]
    runs = merge_runs(list(reversed(spans)))
    assert [[s["token_start"] for s in run] for run in runs] == [[0, 2, 6], [10]]


def test_documents_sharing_an_id_never_merge():
    rows = [_row("f:0", 0, 4, "memorized", doc_id="x"), _row("f:1", 2, 6, "memorized", doc_id="x")]
    assert [(p.doc_row, p.token_start, p.token_end) for p in find_passages(rows)] == [
        ("f:0", 0, 4),
        ("f:1", 2, 6),
    ]


def test_a_passage_row_keeps_the_best_evidence_text_and_counts():
    rows = [
        _row("f:0", 0, 4, "memorized", 1.5),
        _row("f:0", 2, 6, "memorized", 3.0),
        _row("f:0", 1, 5, "not_memorized", 0.4),
        _row("f:0", 4, 8, "memorized", 2.0),
        _row("f:0", 9, 12, "screened_out"),
    ]
    rows[1]["acr_kind"] = "certificate"
    [row] = passage_rows(rows, "tok")
    assert (row["token_start"], row["token_end"], row["tokens"]) == (0, 8, 8)
    assert row["text"] == "t0 t1 t2 t3 t4 t5 t6 t7 " and (row["char_start"], row["char_end"]) == (0, 24)
    assert (row["best_acr"], row["best_prompt"], row["best_span_id"]) == (3.0, "p2", "f:0/2/6")
    assert row["best_acr_kind"] == "certificate"
    assert row["span_ids"] == ["f:0/0/4", "f:0/2/6", "f:0/4/8"] and row["spans"] == 3
    assert row["other_spans_inside"] == 1 and row["calibrated_spans"] is None
    assert row["passage_id"] == passage_id("f:0", 0, 8, "tok") != passage_id("f:0", 0, 8, "other tokenizer")
    assert row["extend_budget"] == 0 and row["extended_tokens"] is None


def test_text_comes_from_the_document_where_the_spans_leave_a_gap():
    # Offsets that skip the space between tokens (some tokenizers trim them): the spans cannot say it.
    a, b = _row("f:0", 0, 2, "memorized"), _row("f:0", 2, 4, "memorized")
    a["char_end"], a["text"] = 5, "t0 t1"
    [passage] = find_passages([a, b])
    assert stitched_text(passage) is None
    with pytest.raises(ValueError, match="gap"):
        passage_rows([a, b], "tok")
    assert passage_rows([a, b], "tok", {"f:0": "t0 t1 t2 t3 "})[0]["text"] == "t0 t1 t2 t3 "


def test_verified_run_counts_the_leading_matches_only():
    assert verified_run([1, 2, 3, 9, 5], [1, 2, 3, 4, 5]) == 3
    assert verified_run([1, 2], [1, 2, 3]) == 2 and verified_run([], [1]) == 0
    rng = random.Random(0)
    ids = [rng.randrange(9) for _ in range(50)]
    assert verified_run(ids, ids) == 50
