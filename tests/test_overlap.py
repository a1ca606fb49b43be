"""Whose words are in the prompt (scanner/measures/overlap.py): the longest shared run against a brute
force, in characters and in token ids (surrogate code points included), and the prompt_source rule."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from scanner.measures.overlap import (
    FREE,
    WORK_TEXT,
    longest_shared_run,
    longest_shared_run_at,
    longest_shared_tokens,
    prompt_overlap,
    prompt_source,
    token_string,
)
from scanner.results.rows import measured_prompt
from scanner.schema import default_row


def brute(a, b) -> int:
    return max(
        [0]
        + [
            j - i
            for i in range(len(a))
            for j in range(i + 1, len(a) + 1)
            if any(list(b[k : k + j - i]) == list(a[i:j]) for k in range(len(b) - (j - i) + 1))
        ]
    )


@given(st.text("abc ", max_size=12), st.text("abc ", max_size=30))
def test_longest_shared_run_is_the_longest_common_substring(needle, haystack):
    assert longest_shared_run(needle, haystack) == brute(needle, haystack)


@given(st.text("abc ", max_size=12), st.text("abc ", max_size=30))
def test_longest_shared_run_at_says_where_the_run_stands(needle, haystack):
    at, length = longest_shared_run_at(needle, haystack)
    assert length == brute(needle, haystack) and haystack[at : at + length] in needle
    assert (at, length) != (0, 0) or not set(needle) & set(haystack)


# Ids around the surrogate block (0xD800-0xDFFF), which a str cannot hold as such: they must stay distinct.
IDS = st.lists(st.sampled_from([0, 1, 2, 0xD7FF, 0xD800, 0xDFFF, 0xE000, 0xE7FF, 200_000]), max_size=10)


@given(IDS, IDS)
def test_longest_shared_tokens_is_the_longest_common_run_of_ids(prompt, ids):
    assert longest_shared_tokens(prompt, ids) == brute(prompt, ids)
    assert longest_shared_tokens(prompt, token_string(ids)) == brute(prompt, ids)
    assert len(set(token_string([0xD800, 0xE000, 0xE7FF]))) == 3


def test_prompt_source_rule():
    assert prompt_source(has_prompt=False, is_certificate=False, run_tokens=None, k=4) is None
    assert (
        prompt_source(has_prompt=True, is_certificate=True, run_tokens=0, k=4) == WORK_TEXT
    )  # however short
    assert prompt_source(has_prompt=True, is_certificate=False, run_tokens=4, k=4) == WORK_TEXT
    assert prompt_source(has_prompt=True, is_certificate=False, run_tokens=3, k=4) == FREE
    assert prompt_source(has_prompt=True, is_certificate=False, run_tokens=3, k=3) == WORK_TEXT


def test_a_prompt_holding_the_works_tokens_outside_its_span_is_work_text_by_the_document():
    document_ids = [9, 8, 7, 6, 5, 1, 2, 3, 4]
    measured = prompt_overlap(
        "a b c d",
        [9, 8, 7, 6],
        "xyz",
        [1, 2, 3, 4],
        is_certificate=False,
        k=4,
        document="w a b c d x",
        document_ids=document_ids,
    )
    assert measured == {
        "prompt_span_run_tokens": 0,
        "prompt_span_run_chars": 0,
        "prompt_doc_run_tokens": 4,
        "prompt_doc_run_chars": 7,
        "prompt_source": WORK_TEXT,
    }
    alone = prompt_overlap("a b c d", [9, 8, 7, 6], "span", [1, 2, 3, 4], is_certificate=False, k=4)
    assert alone["prompt_doc_run_tokens"] is None and alone["prompt_source"] == FREE  # the span alone: free
    empty = prompt_overlap(
        "", [], "span", [1, 2], is_certificate=False, k=4, document="doc", document_ids=[1, 2]
    )
    assert empty["prompt_source"] == FREE and empty["prompt_doc_run_chars"] == 0  # the template alone


def test_a_searched_row_that_kept_its_certificate_is_work_text_and_no_prompt_is_none():
    row = {
        **default_row(),
        "text": "the span",
        "target_ids": [5, 6],
        "acr_kind": "searched_min",
        "prompt": "before",
        "prompt_ids": [1],
        "certificate_prompt": "before",
    }
    assert measured_prompt(row, 4)["prompt_source"] == WORK_TEXT
    assert measured_prompt({**row, "prompt": None, "prompt_ids": None}, 4)["prompt_source"] is None
    assert measured_prompt({**row, "certificate_prompt": None}, 4)["prompt_source"] == FREE
