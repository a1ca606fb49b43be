"""Tiny random-weight models of the families users scan, built from configs in seconds (no download).

Each family's tokenizer keeps its family's special-token conventions (BOS added or not, no BOS token at
all, eos == bos, a pad token only where the family has one, special tokens first or appended after the
vocabulary), its config keeps the family's shape quirks (partial rotary, learned positions and a short
context, tied embeddings, logit soft-capping, sliding windows, embedding rows padded past the
tokenizer's vocabulary), and the three chat families carry a chat template in their family's shape.
Every tokenizer is a byte-level BPE trained on the tiny model's text (studies/tiny.py), whatever the
real family uses (SentencePiece for Gemma, Mistral, Phi-3): the conventions around the vocabulary are
what a scan's defaults meet, not the merges.

Random weights memorize nothing, but every model reproduces its own greedy continuation: `family_corpus`
writes documents that hold one (a seed sentence, the 40 or so tokens the model generates after it, then
word salad), so a scan has real rows to flag, verify, bundle and re-check, and word salad as control.
"""

from __future__ import annotations

import json
import logging
import random
from dataclasses import dataclass, field
from pathlib import Path

from scanner.studies.tiny import WORDS, documents, salad

log = logging.getLogger(__name__)

HIDDEN, LAYERS, HEADS, HEAD_DIM = 64, 2, 2, 32  # head_dim 32: a size vLLM's CPU attention takes
POSITIONS = 256
BPE_SIZE = 512  # merges and alphabet of the shared byte-level BPE, before each family's special tokens
# Random init at 0.02 (HF's default) gives logits within a few hundredths of each other: greedy choices
# that flip with any rounding. A wider init gives margins of several logits, as a trained model has.
INIT_RANGE = 0.3
# Seeds tried until two continuations are long: the first dozen serve in float32, but bfloat16's greedy
# path cuts or repeats more of them (Llama's found one of 32+ tokens in twelve, 2026-12-04).
SEED_COUNT = 48
CONTINUATION = 40  # tokens of the model's own greedy continuation written into the corpus
SEEDS = (
    "The old house stood at the end of the road.",
    "A letter came for the family on a cold morning.",
    "She opened the door and looked at the city.",
    "In the spring the school opened a new building.",
    "The man read the report and closed the book.",
)

LLAMA3_CHAT = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set system = messages[0]['content'] %}"
    "{% set messages = messages[1:] %}{% else %}{% set system = '' %}{% endif %}"
    "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
    "Today Date: 26 Jul 2024\n\n{{ system }}<|eot_id|>"
    "{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n{{ m['content'] | trim }}"
    "<|eot_id|>{% endfor %}{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n"
    "{% endif %}"
)
QWEN_CHAT = (
    "{% if messages[0]['role'] == 'system' %}{{ '<|im_start|>system\n' + messages[0]['content'] + "
    "'<|im_end|>\n' }}{% set messages = messages[1:] %}{% else %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
# Gemma 2's own template: no system role (it raises), turns as <start_of_turn>user / model.
GEMMA_CHAT = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
    "{% endif %}{% for m in messages %}{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if m['role'] == 'assistant' %}{% set role = 'model' %}{% else %}{% set role = m['role'] %}{% endif %}"
    "{{ '<start_of_turn>' + role + '\n' + m['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)


@dataclass(frozen=True, kw_only=True)
class Family:
    """A family's tokenizer conventions and config. Special tokens in `first` take ids 0.., those in
    `last` follow the vocabulary (as GPT-2's <|endoftext|> = 50256 or Llama 3's 128000.. do)."""

    name: str
    first: tuple[str, ...] = ()
    last: tuple[str, ...] = ()
    bos: str | None
    eos: str
    pad: str | None = None
    unk: str | None = None
    add_bos: bool
    chat_template: str | None = None
    vocab_multiple: int = 0  # config vocab_size padded up to a multiple past the tokenizer (0: exact)
    config: dict = field(default_factory=dict)  # the family's own config fields

    @property
    def separator(self) -> str:
        """The token a document starts after: BOS where the tokenizer adds it, else the family's document
        separator (<|endoftext|> where the vocabulary has one, else BOS, else EOS)."""
        if self.add_bos:
            return self.bos
        specials = (*self.first, *self.last)
        return "<|endoftext|>" if "<|endoftext|>" in specials else self.bos or self.eos


FAMILIES = {
    f.name: f
    for f in (
        Family(
            name="llama",
            last=(
                "<|begin_of_text|>",
                "<|end_of_text|>",
                "<|start_header_id|>",
                "<|end_header_id|>",
                "<|eot_id|>",
            ),
            bos="<|begin_of_text|>",
            eos="<|end_of_text|>",
            add_bos=True,
            chat_template=LLAMA3_CHAT,
            config={
                "model_type": "llama",
                "num_key_value_heads": 1,
                "rope_theta": 500000.0,
                "tie_word_embeddings": False,
            },
        ),
        # Pythia: <|endoftext|> = 0 is bos, eos and unk; <|padding|> exists but is not the pad token; config
        # vocab 50304 for 50277 tokens; a quarter of each head rotated.
        Family(
            name="gpt_neox",
            first=("<|endoftext|>", "<|padding|>"),
            bos="<|endoftext|>",
            eos="<|endoftext|>",
            unk="<|endoftext|>",
            add_bos=False,
            vocab_multiple=128,
            config={
                "model_type": "gpt_neox",
                "rotary_pct": 0.25,
                "use_parallel_residual": True,
                "tie_word_embeddings": False,
            },
        ),
        Family(
            name="gpt2",
            last=("<|endoftext|>",),
            bos="<|endoftext|>",
            eos="<|endoftext|>",
            unk="<|endoftext|>",
            add_bos=False,
            config={"model_type": "gpt2", "n_positions": 128},
        ),
        # Qwen2.5: no BOS token (config.json still names <|endoftext|> as bos_token_id), pad = eos, tied
        # embeddings, config vocab padded past the tokenizer's.
        Family(
            name="qwen2",
            last=("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
            bos=None,
            eos="<|endoftext|>",
            pad="<|endoftext|>",
            add_bos=False,
            chat_template=QWEN_CHAT,
            vocab_multiple=64,
            config={
                "model_type": "qwen2",
                "num_key_value_heads": 1,
                "tie_word_embeddings": True,
                "bos_token": "<|endoftext|>",
            },
        ),
        Family(
            name="gemma2",
            first=("<pad>", "<eos>", "<bos>", "<unk>"),
            last=("<start_of_turn>", "<end_of_turn>"),
            bos="<bos>",
            eos="<eos>",
            pad="<pad>",
            unk="<unk>",
            add_bos=True,
            chat_template=GEMMA_CHAT,
            config={
                "model_type": "gemma2",
                "num_key_value_heads": 1,
                "query_pre_attn_scalar": HEAD_DIM,
                "final_logit_softcapping": 30.0,
                "attn_logit_softcapping": 50.0,
                "sliding_window": 48,
                "tie_word_embeddings": True,
            },
        ),
        Family(
            name="mistral",
            first=("<unk>", "<s>", "</s>"),
            bos="<s>",
            eos="</s>",
            unk="<unk>",
            add_bos=True,
            config={
                "model_type": "mistral",
                "num_key_value_heads": 1,
                "sliding_window": 48,
                "tie_word_embeddings": False,
            },
        ),
        # Phi-3-mini (assumed from its tokenizer_config): Llama's <unk> <s> </s> first, add_bos_token false,
        # eos = pad = <|endoftext|> appended after the vocabulary with its chat tokens; config vocab 32064
        # for 32011 tokens.
        Family(
            name="phi3",
            first=("<unk>", "<s>", "</s>"),
            last=("<|endoftext|>", "<|assistant|>", "<|system|>", "<|end|>", "<|user|>"),
            bos="<s>",
            eos="<|endoftext|>",
            pad="<|endoftext|>",
            unk="<unk>",
            add_bos=False,
            vocab_multiple=64,
            config={"model_type": "phi3", "tie_word_embeddings": False},
        ),
        # OLMo 2 (assumed from the dolma2 tokenizer): bos = eos = <|endoftext|>, not added; pad <|pad|>;
        # config.json bos_token_id null; config vocab 100352 for 100278 tokens; QK-norm.
        Family(
            name="olmo2",
            last=("<|endoftext|>", "<|pad|>"),
            bos="<|endoftext|>",
            eos="<|endoftext|>",
            pad="<|pad|>",
            add_bos=False,
            vocab_multiple=128,
            config={"model_type": "olmo2", "tie_word_embeddings": False, "bos_token": None},
        ),
    )
}
CHAT_FAMILIES = tuple(name for name, f in FAMILIES.items() if f.chat_template)


def seeds(count: int = 12) -> list[str]:
    """Seed sentences: SEEDS, then sentences of the tiny model's words. Each gets its continuation; the
    two longest that tokenize back whole go into the corpus."""
    rng = random.Random(3)
    extra = [
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 9))).capitalize() + "."
        for _ in range(count - len(SEEDS))
    ]
    return [*SEEDS, *extra]


def bpe_texts() -> list[str]:
    """The tiny model's documents and the seeds: the text every family's BPE is trained on."""
    return [*documents_text(), *SEEDS]


def documents_text() -> list[str]:
    from scanner.studies.tiny import TinySpec

    return documents(TinySpec(documents=200))


def base_bpe(texts: list[str]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """(vocabulary, merges) of one byte-level BPE trained on `texts`, shared by every family. Its alphabet
    is the text's own bytes (printable ASCII), so a random model's greedy tokens decode to text that
    tokenizes back to them."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=BPE_SIZE, show_progress=False))
    model = json.loads(tok.to_str())["model"]
    return model["vocab"], [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]


def family_tokenizer(family: Family, bpe: tuple[dict[str, int], list[tuple[str, str]]]):
    """The shared BPE with the family's special tokens: `first` at ids 0.., `last` after the vocabulary,
    BOS added by the post-processor only where the family adds it."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab, merges = bpe
    shifted = {token: i for i, token in enumerate(family.first)}
    shifted.update({token: i + len(family.first) for token, i in vocab.items()})
    tok = Tokenizer(models.BPE(shifted, list(merges)))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t in (*family.first, *family.last)]
    )
    if family.add_bos:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{family.bos} $A",
            pair=f"{family.bos} $A {family.bos} $B",
            special_tokens=[(family.bos, tok.token_to_id(family.bos))],
        )
    named = {
        "bos_token": family.bos,
        "eos_token": family.eos,
        "pad_token": family.pad,
        "unk_token": family.unk,
    }
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, **{k: v for k, v in named.items() if v is not None})
    if family.chat_template:
        fast.chat_template = family.chat_template
    return fast


def _config(family: Family, tokenizer):
    from transformers import AutoConfig

    rows = len(tokenizer)
    if family.vocab_multiple:
        rows = -(-(rows + 1) // family.vocab_multiple) * family.vocab_multiple  # strictly past the tokenizer
    fields = dict(family.config)
    model_type = fields.pop("model_type")
    bos = fields.pop("bos_token", family.bos)
    ids = {
        "bos_token_id": tokenizer.convert_tokens_to_ids(bos) if bos else None,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    if model_type == "gpt2":
        shape = {"n_embd": HIDDEN, "n_layer": LAYERS, "n_head": HEADS, "n_inner": 2 * HIDDEN}
    else:
        shape = {
            "hidden_size": HIDDEN,
            "intermediate_size": 2 * HIDDEN,
            "num_hidden_layers": LAYERS,
            "num_attention_heads": HEADS,
            "max_position_embeddings": POSITIONS,
        }
        if model_type != "gpt_neox":
            shape["head_dim"] = HEAD_DIM
        if model_type == "phi3":
            shape["original_max_position_embeddings"] = POSITIONS
    return AutoConfig.for_model(
        model_type, vocab_size=rows, initializer_range=INIT_RANGE, **shape, **ids, **fields
    )


def build_model(family: Family, tokenizer, seed: int = 0):
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(_config(family, tokenizer), dtype=torch.float32)
    if family.config["model_type"].startswith("gemma"):
        # Gemma multiplies its embeddings by sqrt(hidden): at the same init the residual stream would be
        # the input token alone, and the tied head would repeat it forever.
        with torch.no_grad():
            model.get_input_embeddings().weight /= HIDDEN**0.5
    return model.eval()


def _tokenizer_config(out: Path, family: Family) -> None:
    """add_bos_token / add_eos_token written as the family's files have them (read by people and by
    tools that go by the file; the tokenizer.json's post-processor is what adds the BOS)."""
    path = out / "tokenizer_config.json"
    config = json.loads(path.read_text())
    config.update(add_bos_token=family.add_bos, add_eos_token=False)
    path.write_text(json.dumps(config, indent=2))


def _zero_padding_rows(model, tokenizer) -> None:
    """Embedding rows past the tokenizer's vocabulary as a trained model leaves them (never a target,
    near zero): a zero row's logit 0 never beats the best of hundreds of random logits, so greedy
    generation stays on real tokens."""
    import torch

    real = len(tokenizer)
    with torch.no_grad():
        for emb in {id(e): e for e in (model.get_input_embeddings(), model.get_output_embeddings())}.values():
            emb.weight[real:] = 0.0


@dataclass(frozen=True)
class Continuation:
    seed: str
    text: str  # the model's greedy continuation of the seed, decoded
    ids: list[int]
    separator_id: int


def greedy(model, ids: list[int], new_tokens: int) -> list[int]:
    """`new_tokens` greedy tokens after `ids`, through EOS (a stop is the caller's to cut)."""
    import torch

    with torch.no_grad():
        out = model.generate(
            torch.tensor([ids], device=model.device),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long, device=model.device),
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
        )
    return out[0, len(ids) :].tolist()


def continuation(model, tokenizer, family: Family, seed: str) -> Continuation:
    """The model's greedy continuation of [separator] + seed, cut before any special token and to the
    longest head whose decoded text, written after the seed and before a line break, tokenizes back to
    the same ids."""
    sep = tokenizer.convert_tokens_to_ids(family.separator)
    seed_ids = tokenizer(seed, add_special_tokens=False).input_ids
    ids = greedy(model, [sep, *seed_ids], CONTINUATION)
    special = set(tokenizer.all_special_ids)
    ids = ids[: next((k for k, i in enumerate(ids) if i in special or i >= len(tokenizer)), len(ids))]
    for k in range(len(ids), 0, -1):
        text = tokenizer.decode(ids[:k], clean_up_tokenization_spaces=False)
        whole = tokenizer(seed + text + "\n", add_special_tokens=False).input_ids
        if (
            whole[: len(seed_ids) + k] == seed_ids + ids[:k]
            and tokenizer(text, add_special_tokens=False).input_ids == ids[:k]
        ):
            return Continuation(seed, text, ids[:k], sep)
    return Continuation(seed, "", [], sep)


def own_continuations(
    model, tokenizer, family: Family, wanted: int = 2, long: int = 32
) -> list[Continuation]:
    """The first `wanted` seeds' continuations of at least `long` tokens (else the longest found)."""
    found: list[Continuation] = []
    for seed in seeds(SEED_COUNT):
        found.append(continuation(model, tokenizer, family, seed))
        if sum(len(c.ids) >= long for c in found) >= wanted:
            break
    return sorted(found, key=lambda c: -len(c.ids))[:wanted]


def family_corpus(conts: list[Continuation], seed: int = 0) -> list[dict]:
    """Documents: each continuation after its seed sentence, then word salad (memorized rows); word salad
    alone (controls), one of them longer than GPT-2's 128 positions."""
    rng = random.Random(seed)
    docs = [{"id": f"own-{i}", "text": f"{c.seed}{c.text}\n{salad(rng, 12)}"} for i, c in enumerate(conts)]
    docs += [{"id": f"control-{i}", "text": salad(rng, words)} for i, words in enumerate((30, 40, 160))]
    return docs


def build_family(
    name: str, out_dir: str | Path, bpe=None, device: str = "cpu", dtype: str = "float32"
) -> Path:
    """The family's HF directory (config.json, model.safetensors, tokenizer files) with family.json: the
    continuations its corpus holds and corpus.parquet. Reused when family.json's spec is unchanged. The
    continuations are generated on `device` in `dtype` (the weights are saved in float32): a scan on
    that numeric path finds them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    family = FAMILIES[name]
    out = Path(out_dir)
    spec = {
        "family": repr(family),
        "hidden": HIDDEN,
        "layers": LAYERS,
        "init": INIT_RANGE,
        "seeds": seeds(SEED_COUNT),
        "continuation": CONTINUATION,
        "device": device,
        "dtype": dtype,
        "version": 2,
    }
    marker = out / "family.json"
    if marker.is_file() and json.loads(marker.read_text()).get("spec") == json.loads(json.dumps(spec)):
        return out
    tokenizer = family_tokenizer(family, bpe or base_bpe(bpe_texts()))
    model = build_model(family, tokenizer)
    _zero_padding_rows(model, tokenizer)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    model.generation_config.save_pretrained(out)
    tokenizer.save_pretrained(out)
    _tokenizer_config(out, family)
    conts = own_continuations(as_loaded(out, device, dtype), tokenizer, family)
    pq.write_table(pa.Table.from_pylist(family_corpus(conts)), out / "corpus.parquet")
    info = {
        "spec": spec,
        "family": name,
        "separator": family.separator,
        "add_bos": family.add_bos,
        "chat": family.chat_template is not None,
        "vocab_rows": model.get_input_embeddings().weight.shape[0],
        "tokens": len(tokenizer),
        "continuations": [c.__dict__ for c in conts],
    }
    marker.write_text(json.dumps(info, indent=1))
    log.info("family %s: continuations of %s tokens", name, [len(c.ids) for c in conts])
    return out


def as_loaded(where: Path, device: str, dtype: str):
    """The saved model loaded by the scan's own loader (engine/loading.py, from_pretrained in `dtype`). Not
    `model.to(dtype)`: that also casts float buffers such as RoPE's inv_freq, which from_pretrained keeps
    in float32, and in bfloat16 the two paths' greedy continuations part within a few dozen tokens
    (Llama, Phi-3, Mistral and Gemma 2's on an H200 and on the CPU, 2026-12-04)."""
    from scanner.config import ModelConfig
    from scanner.engine.loading import load_model

    return load_model(ModelConfig(model=str(where), device=device, dtype=dtype)).model


def build_families(
    root: str | Path, names: tuple[str, ...] | None = None, device: str = "cpu", dtype: str = "float32"
) -> dict[str, Path]:
    bpe = base_bpe(bpe_texts())
    return {
        name: build_family(name, Path(root) / name, bpe, device, dtype) for name in names or tuple(FAMILIES)
    }


def control_text(seed: int = 7, words: int = 14) -> str:
    """Word salad none of the families was given: a target no model reproduces."""
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(words)) + "."
