"""Probe sampling's draft model (config.DraftConfig): a smaller model of the target's tokenizer that
scores every GCG candidate so the target scores only a few (search/gcg.py probe_scores).

The candidates are the target's token ids, fed to the draft as they are, so the two must share one
tokenizer: the same vocabulary (every token at the same id) and the same special tokens. That is
checked from the tokenizers alone before any run directory is made (`check_draft`), and again with the
loaded draft's template (`attach_draft`): the draft scores the exact sequences the target would."""

from __future__ import annotations

import logging
import time
from dataclasses import replace

from scanner.config import ModelConfig, PromptConfig
from scanner.engine.check import check_model
from scanner.engine.hf import HFEngine
from scanner.engine.loading import load_model, load_tokenizer
from scanner.errors import InputError

log = logging.getLogger(__name__)

SHOWN = 3  # differing tokens named in the error


def draft_model(model: ModelConfig, draft: str) -> ModelConfig:
    """The draft's ModelConfig: the target's device, dtype and threads, its own path and no revision."""
    return replace(model, model=draft, revision=None)


def vocabulary_problems(target, draft) -> list[str]:
    """How two tokenizers differ in what a candidate's ids mean: tokens at other ids, other special tokens."""
    problems = []
    vt, vd = target.get_vocab(), draft.get_vocab()
    if vt != vd:
        moved = sorted(t for t in set(vt) | set(vd) if vt.get(t) != vd.get(t))
        problems.append(
            f"{len(moved)} of {len(vt)} tokens differ (e.g. {', '.join(repr(t) for t in moved[:SHOWN])}); "
            f"vocabulary sizes {len(vt)} and {len(vd)}"
        )
    for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
        a, b = getattr(target, name, None), getattr(draft, name, None)
        if a != b:
            problems.append(f"{name} {a} and {b}")
    if sorted(target.all_special_ids) != sorted(draft.all_special_ids):
        problems.append(
            f"special token ids {sorted(target.all_special_ids)} and {sorted(draft.all_special_ids)}"
        )
    return problems


def encoding_problems(target, other, texts: list[str]) -> list[str]:
    """How two tokenizers of one vocabulary differ in use: the texts they cut into other ids (other merges,
    normalizer or pre-tokenizer behind the same vocabulary)."""
    ids = (
        [
            target(texts, add_special_tokens=False)["input_ids"],
            other(texts, add_special_tokens=False)["input_ids"],
        ]
        if texts
        else [[], []]
    )
    differ = [text for text, a, b in zip(texts, *ids, strict=True) if a != b]
    if not differ:
        return []
    return [
        f"the same vocabulary cuts {len(differ)} of {len(texts)} sample texts into other token ids (other merges "
        f"or normalization; e.g. {differ[0][:40]!r})"
    ]


def _refusal(model: str, draft: str, problems: list[str]) -> InputError:
    return InputError(
        f"--draft-model {draft}: its tokenizer is not the one of --model {model} "
        f"({'; '.join(problems)}); a draft scores the target's token ids, so it must share the "
        "target's tokenizer: pass a smaller model of the same family (trained with the same "
        "tokenizer), or leave --draft-model out"
    )


def check_draft(model: ModelConfig, draft: str) -> None:
    """Before anything is written: the draft's files check out and its tokenizer is the target's
    (tokenizers only, no weights)."""
    try:
        check_model(draft_model(model, draft))
    except InputError as err:
        raise InputError(f"--draft-model: {err}") from err
    target_tokenizer, _ = load_tokenizer(model)
    try:
        draft_tokenizer, _ = load_tokenizer(draft_model(model, draft))
    except InputError as err:
        raise InputError(f"--draft-model: {err}") from err
    problems = vocabulary_problems(target_tokenizer, draft_tokenizer)
    if problems:
        raise _refusal(model.model, draft, problems)


def attach_draft(engine: HFEngine, model: ModelConfig, draft: str, prompt: PromptConfig) -> HFEngine:
    """Load the draft beside `engine` (its load seconds recorded on it) and attach it; refused when its
    tokenizer or template differs from the target's."""
    start = time.perf_counter()
    loaded = load_model(draft_model(model, draft))
    problems = vocabulary_problems(engine.tokenizer, loaded.tokenizer)
    if problems:
        raise _refusal(model.model, draft, problems)
    ours = HFEngine(loaded, prompt)
    if (ours.template.prefix_ids, ours.template.suffix_ids) != (
        engine.template.prefix_ids,
        engine.template.suffix_ids,
    ):
        raise _refusal(
            model.model,
            draft,
            [
                f"the prompt template's fixed ids differ ({ours.template.prefix_ids} + "
                f"{ours.template.suffix_ids} against {engine.template.prefix_ids} + "
                f"{engine.template.suffix_ids})"
            ],
        )
    engine.draft, engine.draft_name, engine.draft_load_s = ours, draft, time.perf_counter() - start
    log.info("draft model %s loaded in %.2f s", draft, engine.draft_load_s)
    return ours
