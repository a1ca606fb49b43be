"""Extension by greedy generation (scanner/stages/extend.py) on the tiny model, checked against the
document: a canary followed by the rest of itself is extended to its end; the same start followed by
unrelated text is not; the budget caps the run."""

from __future__ import annotations

import random

import pytest

from scanner.config import PassageConfig
from scanner.measures.passages import find_passages
from scanner.stages.extend import DocumentTokens, candidates, extend_passages
from scanner.stages.spans import tokenize_document
from scanner.studies.tiny import CANARIES, salad

START, END = 5, 10  # the passage: tokens 5-10 of the canary ("times, it was the")


def _doc(engine, text: str) -> DocumentTokens:
    return DocumentTokens(text, *tokenize_document(text, engine.tokenizer))


def _passages(doc: DocumentTokens, prompt: str, key: str = "f:0"):
    a, b = doc.offsets[START][0], doc.offsets[END - 1][1]
    row = {
        "doc_id": "d",
        "doc_row": key,
        "span_id": f"span-{key}",
        "token_start": START,
        "token_end": END,
        "char_start": a,
        "char_end": b,
        "text": doc.text[a:b],
        "status": "memorized",
        "acr": 1.7,
        "prompt": prompt,
        "prompt_tokens": 3,
        "certificate_prompt": None,
    }
    return find_passages([row])


@pytest.fixture(scope="module")
def docs(engine):
    canary, rest = CANARIES[0], salad(random.Random(5), 30)
    memorized = _doc(engine, f"{canary}\n{rest}")
    cut = memorized.offsets[END][0]
    unrelated = _doc(engine, f"{canary[:cut]} {rest}")  # the passage, then text the model never saw after it
    return canary, memorized, unrelated, canary[: memorized.offsets[START][0]]


def test_a_canary_continued_by_itself_is_extended_to_its_end_and_unrelated_text_is_not(engine, docs):
    canary, memorized, unrelated, prompt = docs
    passages = _passages(memorized, prompt, "f:0") + _passages(unrelated, prompt, "f:1")
    got = extend_passages(engine, passages, {"f:0": memorized, "f:1": unrelated}, 32)  # one batched call
    canary_end = len(tokenize_document(canary, engine.tokenizer)[0])
    assert got[0].token_end >= canary_end and got[0].prompt == prompt and got[0].engine == "hf"
    assert got[0].text.startswith(canary[memorized.offsets[END - 1][1] :])  # the rest of the canary, verbatim
    assert memorized.text[passages[0].char_end : got[0].char_end] == got[0].text
    assert got[1].token_end - END <= 1, "unrelated text after the passage is not reproduced"
    assert got[1].text == unrelated.text[passages[1].char_end : got[1].char_end]


def test_the_budget_caps_the_extension_and_a_useless_prompt_extends_nothing(engine, docs):
    _, memorized, _, prompt = docs
    [capped] = extend_passages(engine, _passages(memorized, prompt), {"f:0": memorized}, 3)
    assert capped.token_end == END + 3
    [none] = extend_passages(engine, _passages(memorized, "zq"), {"f:0": memorized}, 8)
    assert none.token_end == END and none.text == ""  # never before the passage's own end


def test_candidates_best_prompt_first_then_the_last_span_and_its_certificate():
    rows = [
        {
            "doc_id": "d",
            "doc_row": "r",
            "span_id": s,
            "token_start": a,
            "token_end": a + 4,
            "char_start": a,
            "char_end": a + 4,
            "text": "abcd",
            "status": "memorized",
            "acr": acr,
            "prompt": p,
            "prompt_tokens": 2,
            "certificate_prompt": c,
        }
        for s, a, acr, p, c in (("x", 0, 3.0, "best", None), ("y", 2, 1.5, "last", "ctx"))
    ]
    [passage] = find_passages(rows)
    assert [(p, s["span_id"]) for p, s in candidates(passage)] == [("best", "x"), ("last", "y"), ("ctx", "y")]


def test_a_negative_budget_is_refused_with_the_fix():
    with pytest.raises(Exception, match="--extend-tokens -1 must be >= 0"):
        PassageConfig(extend_tokens=-1)
