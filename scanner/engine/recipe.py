"""How a prompt string becomes the model's input, written down for a re-check that has only torch and
transformers (scanner/results/recheck.py): the fixed text around the prompt, the BOS policy, the ids
both must give and the EOS ids generation stops at. The same recipe as typed_ids (engine/template.py)
and HFEngine's generation, so a bundle states exactly what the scan fed the model."""

from __future__ import annotations

from scanner.config import ModelConfig, PromptConfig
from scanner.engine.loading import load_tokenizer, stop_ids
from scanner.engine.template import PromptTemplate, build_template

HOW = (
    "input ids = bos_ids + tokenizer(prefix_text + prompt + suffix_text, add_special_tokens=False)"
    ".input_ids, which must equal prefix_ids + prompt_ids + suffix_ids; then greedy generation "
    "(do_sample=False, num_beams=1, repetition_penalty=1.0) of len(target_ids) new tokens, stopping at "
    "stop_ids; the span is reproduced when the generated ids start with target_ids"
)
COMPARED = ("prefix_text", "suffix_text", "bos_ids", "prefix_ids", "suffix_ids", "stop_ids")


def recipe(template: PromptTemplate, stops: list[int], trust_remote_code: bool = False) -> dict:
    return {
        "prefix_text": template.prefix_text,
        "suffix_text": template.suffix_text,
        "bos_ids": list(template.bos_ids),
        "prefix_ids": list(template.prefix_ids),
        "suffix_ids": list(template.suffix_ids),
        "bos_policy": template.bos_policy,
        "stop_ids": list(stops),
        "add_special_tokens": False,
        "trust_remote_code": trust_remote_code,
        "how": HOW,
    }


def input_recipe(model: ModelConfig, prompt: PromptConfig) -> dict:
    """The recipe of `model` under the run's prompt settings, from its tokenizer and configs alone."""
    tokenizer, adds_bos = load_tokenizer(model)
    return recipe(build_template(tokenizer, prompt, adds_bos), stop_ids(model), model.trust_remote_code)


def recipe_problems(recorded: dict, now: dict) -> list[str]:
    """One line per part of the recipe that differs (the tokenizer or template is not the scan's)."""
    return [
        f"input recipe {key}: the evidence's is {recorded.get(key)!r}, this model gives {now.get(key)!r}"
        for key in COMPARED
        if recorded.get(key) != now.get(key)
    ]
