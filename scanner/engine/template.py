"""Where the free tokens sit, and how a prompt string is typed in.

The full model input is  [prefix ids][free prompt ids][suffix ids][target ids]. Prefix and suffix
(BOS, chat template, system prompt, instruction) are fixed and uncounted. A prompt counts only if the
user can type its string: tokenizing prefix_text + prompt + suffix_text as the user would must give
back exactly the same ids (METHOD.md, defects 3 and 4).
"""

from __future__ import annotations

from dataclasses import dataclass

from scanner.config import PromptConfig
from scanner.errors import InputError

SLOT = "ACRPROMPTSLOT"  # placeholder rendered through the chat template and split on


@dataclass(frozen=True)
class PromptTemplate:
    prefix_text: str
    suffix_text: str
    bos_ids: tuple[int, ...]
    prefix_ids: tuple[int, ...]
    suffix_ids: tuple[int, ...]
    bos_policy: str  # human-readable, shown in every result

    @property
    def has_fixed_tokens(self) -> bool:
        return bool(self.prefix_ids or self.suffix_ids)

    def full_text(self, prompt: str) -> str:
        return self.prefix_text + prompt + self.suffix_text


def _adds_bos(tokenizer) -> bool:
    bos = tokenizer.bos_token_id
    return bos is not None and tokenizer("a", add_special_tokens=True).input_ids[:1] == [bos]


# The token GPT-2, GPT-NeoX (Pythia), Qwen, SmolLM and OLMo put between the documents they were
# pretrained on: what their models saw before every document's first token.
SEPARATOR = "<|endoftext|>"


def separator_id(tokenizer) -> tuple[int | None, str]:
    """The document separator of a tokenizer that adds no BOS, and its name: <|endoftext|> where the
    vocabulary has it, else the BOS token,
    else the EOS token; (None, "") when it has none of them."""
    sep = tokenizer.convert_tokens_to_ids(SEPARATOR)  # the unknown token's id where the vocabulary lacks it
    if isinstance(sep, int) and tokenizer.convert_ids_to_tokens(sep) == SEPARATOR:
        return sep, SEPARATOR
    for name in ("bos", "eos"):
        token_id = getattr(tokenizer, f"{name}_token_id")
        if token_id is not None:
            return token_id, f"{getattr(tokenizer, f'{name}_token')} ({name.upper()})"
    return None, ""


def _separator(tokenizer, why: str) -> tuple[tuple[int, ...], str]:
    sep, name = separator_id(tokenizer)
    if sep is None:
        raise InputError(
            f"--bos {why}: this tokenizer has no BOS, EOS or {SEPARATOR} token to open a "
            "document with; pass --bos never (acr only: a scan cannot score a document's first "
            "token without a position before it) or --chat"
        )
    return (sep,), f"document separator {name} id {sep} prepended (--bos {why}), uncounted"


def bos_ids(
    tokenizer, policy: str, chat: bool, file_adds_bos: bool | None = None
) -> tuple[tuple[int, ...], str]:
    """The uncounted start-of-input prefix and a description of why. `file_adds_bos`: the model file's own
    flag (GGUF), which wins over a tokenizer that lost it in conversion.

    auto: the BOS the tokenizer (or model file) adds; where it adds none (GPT-2, GPT-NeoX, Qwen and most
    byte-level BPE families), the document separator the family was pretrained with. Without one, a
    document's first token has no position before it to be predicted from, and a prompt's first free
    token would open the input where the model never saw a document start."""
    bos = tokenizer.bos_token_id
    if policy == "never" or (policy in ("auto", "separator") and chat):
        return (), "none (chat template text carries any BOS)" if chat else "none (--bos never)"
    if policy == "always":
        if bos is None:
            raise InputError(
                "--bos always: this tokenizer has no BOS token; pass --bos auto (the document "
                "separator) or never"
            )
        return (bos,), f"BOS id {bos} prepended (--bos always), uncounted"
    if policy == "separator":
        return _separator(tokenizer, "separator")
    if file_adds_bos and bos is not None:
        return (bos,), f"BOS id {bos} prepended as the model file asks (add_bos_token), uncounted"
    if _adds_bos(tokenizer) and file_adds_bos is not False:
        return (bos,), f"BOS id {bos} prepended as the tokenizer does, uncounted"
    if separator_id(tokenizer)[0] is None:  # `acr` still runs; a scan is refused (run/driver.py)
        return (), "none (the tokenizer adds no BOS and has no BOS, EOS or separator token)"
    return _separator(tokenizer, "auto")


def _chat_parts(tokenizer, config: PromptConfig) -> tuple[str, str]:
    if not getattr(tokenizer, "chat_template", None):
        raise InputError("--chat: this tokenizer has no chat template; drop --chat for a base model")
    content = f"{config.instruction} {SLOT}" if config.instruction else SLOT
    messages = [{"role": "user", "content": content}]
    if config.system_prompt:
        messages.insert(0, {"role": "system", "content": config.system_prompt})
    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    except Exception as err:  # the template's own raise_exception (jinja2's TemplateError), e.g. Gemma's
        fix = (
            "this template has no system role: drop --system-prompt, or put it in --instruction"
            if config.system_prompt
            else "drop --chat, or fix the template"
        )
        raise InputError(f"--chat: the model's chat template refused the messages ({err}); {fix}") from err
    if text.count(SLOT) != 1:
        raise InputError("--chat: the chat template does not keep the user text verbatim; drop --chat")
    prefix, suffix = text.split(SLOT)
    return prefix, suffix


def build_template(tokenizer, config: PromptConfig, file_adds_bos: bool | None = None) -> PromptTemplate:
    """Render the fixed text once; the caller's tokenizer is only read, never changed."""
    if config.chat:
        prefix_text, suffix_text = _chat_parts(tokenizer, config)
    else:
        prefix_text, suffix_text = config.instruction or "", ""
    bos, description = bos_ids(tokenizer, config.bos, config.chat, file_adds_bos)
    encode = lambda text: tuple(tokenizer(text, add_special_tokens=False).input_ids) if text else ()  # noqa: E731
    return PromptTemplate(
        prefix_text=prefix_text,
        suffix_text=suffix_text,
        bos_ids=bos,
        prefix_ids=bos + encode(prefix_text),
        suffix_ids=encode(suffix_text),
        bos_policy=description,
    )


def typed_ids(tokenizer, template: PromptTemplate, prompts: list[str]) -> list[list[int]]:
    """Token ids of each prompt string as a user would type it inside the template."""
    texts = [template.full_text(p) for p in prompts]
    encoded = tokenizer(texts, add_special_tokens=False).input_ids
    return [list(template.bos_ids) + ids for ids in encoded]


def free_ids(template: PromptTemplate, full: list[int]) -> list[int] | None:
    """The free tokens of a typed input, or None when the fixed parts did not survive tokenization."""
    p, s = len(template.prefix_ids), len(template.suffix_ids)
    if len(full) < p + s or tuple(full[:p]) != template.prefix_ids:
        return None
    if s and tuple(full[len(full) - s :]) != template.suffix_ids:
        return None
    return full[p : len(full) - s]


def decode_prompts(tokenizer, prompts: list[list[int]]) -> list[str]:
    return tokenizer.batch_decode(prompts, skip_special_tokens=False, clean_up_tokenization_spaces=False)


def retokenizes(tokenizer, template: PromptTemplate, prompts: list[list[int]]) -> list[bool]:
    """For each id sequence: does its decoded string, typed in the template, give the same ids?"""
    if not prompts:
        return []
    typed = typed_ids(tokenizer, template, decode_prompts(tokenizer, prompts))
    expected = [list(template.prefix_ids) + list(p) + list(template.suffix_ids) for p in prompts]
    return [t == e for t, e in zip(typed, expected, strict=True)]
