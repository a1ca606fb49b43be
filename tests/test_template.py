"""BOS policy, chat templates, prompt vocabulary and retokenization safety on the tiny tokenizer."""

import copy
import json

import pytest

from scanner.config import PromptConfig
from scanner.engine.template import SLOT, build_template, retokenizes, typed_ids
from scanner.engine.vocab import allowed_token_ids
from scanner.errors import InputError


@pytest.fixture(scope="module")
def tok(loaded):
    return loaded.tokenizer


def snapshot(tokenizer):
    return (
        tokenizer.chat_template,
        tokenizer.pad_token,
        tokenizer.padding_side,
        len(tokenizer),
        json.dumps(tokenizer.special_tokens_map, sort_keys=True),
        tokenizer.backend_tokenizer.to_str(),
    )


def test_bos_policy_is_explicit(tok):
    auto = build_template(tok, PromptConfig())
    assert auto.prefix_ids == (tok.bos_token_id,) and "BOS" in auto.bos_policy
    never = build_template(tok, PromptConfig(bos="never"))
    assert never.prefix_ids == () and not never.has_fixed_tokens
    assert typed_ids(tok, never, ["Call me"])[0] == tok("Call me", add_special_tokens=False).input_ids
    assert typed_ids(tok, auto, ["Call me"])[0] == tok("Call me").input_ids  # what the tokenizer does itself


def test_chat_template_puts_free_tokens_in_the_user_turn(tok):
    before = snapshot(tok)
    t = build_template(tok, PromptConfig(chat=True, system_prompt="Be brief.", instruction="Quote:"))
    assert t.prefix_text == "system: Be brief.</s>\nuser: Quote: "
    assert t.suffix_text == "</s>\nassistant:"
    assert SLOT not in t.prefix_text + t.suffix_text
    ids = typed_ids(tok, t, [" age"])[0]
    assert ids[: len(t.prefix_ids)] == list(t.prefix_ids)
    assert ids[len(ids) - len(t.suffix_ids) :] == list(t.suffix_ids)
    assert snapshot(tok) == before, "the caller's tokenizer must not change"


def test_chat_without_a_template_is_a_clear_error(tok):
    bare = copy.deepcopy(tok)
    bare.chat_template = None
    with pytest.raises(InputError, match="no chat template"):
        build_template(bare, PromptConfig(chat=True))
    with pytest.raises(InputError, match="--system-prompt needs --chat"):
        PromptConfig(system_prompt="x")


def test_prompt_vocabulary_is_hygienic(tok):
    rows = len(tok) + 7  # embedding matrices are often padded past the tokenizer
    allowed = allowed_token_ids(tok, rows, allow_non_ascii=False)
    assert allowed and max(allowed) < len(tok)
    assert not set(allowed) & set(tok.all_special_ids)
    for i in allowed:
        text = tok.decode([i])
        assert text.isascii() and tok(text, add_special_tokens=False).input_ids == [i]
    wide = allowed_token_ids(tok, rows, allow_non_ascii=True)
    assert set(allowed) <= set(wide) and len(wide) > len(allowed)  # byte pieces of UTF-8 exist too


def test_retokenization_rejects_sequences_that_merge(tok):
    t = build_template(tok, PromptConfig())
    merged = tok(" the", add_special_tokens=False).input_ids
    assert len(merged) == 1
    pieces = [tok.convert_tokens_to_ids(p) for p in ("Ġt", "he")]  # " t" + "he" re-tokenizes as " the"
    assert None not in pieces and tok.decode(pieces) == " the"
    assert retokenizes(tok, t, [merged, pieces]) == [True, False]
