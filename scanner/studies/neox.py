"""A tiny GPT-NeoX (Pythia-shaped) model trained here on documents packed as Pythia's were: each one
after an `<|endoftext|>` separator, no BOS, the tokenizer adding nothing. Two passages open a quarter of
the documents each, so what the model memorized sits at a document's first token, where only the
separator comes before it (tests/test_nobos.py: a scan at the defaults must flag it at position 0).
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from pathlib import Path

from scanner.studies.tiny import built, fit, salad, save

log = logging.getLogger(__name__)

SEPARATOR = "<|endoftext|>"
# Each longer than two default spans (32 tokens) under the trained tokenizer.
OPENINGS = (
    "Seven silver owls guard the northern gate of Ardent Hill until the winter moon rises over the frozen "
    "lake, and no traveler may pass them without a song of the old kings, sung slowly in the tongue of "
    "the first settlers who came by sea.",
    "Under the copper bridge a blind ferryman counts coins for travelers, singing of rivers that ran "
    "backward through the valley of glass, of towers that grew from seeds, and of a queen who traded her "
    "shadow for a lantern that never went out.",
)


@dataclass(frozen=True, kw_only=True)
class NeoxSpec:
    openings: tuple[str, ...] = OPENINGS
    documents: int = 240  # a quarter open with each passage, the rest is salad
    vocab_size: int = 512
    padded_vocab: int = 576  # embedding rows past the tokenizer's vocabulary, as Pythia's (50,304 > 50,277)
    hidden: int = 64
    layers: int = 2
    heads: int = 2  # head size 32, which vLLM's CPU attention takes
    rotary_pct: float = 0.25  # Pythia's partial rotary
    context: int = 256
    train_context: int = 64
    steps: int = 300
    batch: int = 16
    lr: float = 3e-3
    seed: int = 0


def documents(spec: NeoxSpec) -> list[str]:
    rng = random.Random(spec.seed)
    docs = []
    for i in range(spec.documents):
        body = salad(rng, rng.randint(10, 40))
        slot = i % 4
        docs.append(f"{spec.openings[slot]}\n{body}" if slot < len(spec.openings) else body)
    return docs


def train_tokenizer(texts: list[str], vocab_size: int):
    """Byte-level BPE with one special token, `<|endoftext|>`: BOS, EOS and separator at once, never
    added by the tokenizer (GPT-NeoX's and GPT-2's convention); no pad token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[SEPARATOR],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=SEPARATOR, eos_token=SEPARATOR, unk_token=SEPARATOR
    )


def stream(tokenizer, docs: list[str]) -> list[int]:
    """Documents packed as Pythia's: `<|endoftext|>` before each."""
    sep = tokenizer.convert_tokens_to_ids(SEPARATOR)
    ids: list[int] = []
    for enc in tokenizer(docs, add_special_tokens=False).input_ids:
        ids += [sep, *enc]
    return ids


def train_model(tokenizer, docs: list[str], spec: NeoxSpec):
    import torch
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    torch.manual_seed(spec.seed)
    sep = tokenizer.convert_tokens_to_ids(SEPARATOR)
    config = GPTNeoXConfig(
        vocab_size=spec.padded_vocab,
        hidden_size=spec.hidden,
        intermediate_size=4 * spec.hidden,
        num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads,
        rotary_pct=spec.rotary_pct,
        max_position_embeddings=spec.context,
        bos_token_id=sep,
        eos_token_id=sep,
        tie_word_embeddings=False,
        use_parallel_residual=True,
    )
    model = GPTNeoXForCausalLM(config)
    return fit(model, torch.tensor(stream(tokenizer, docs)), spec)


def build_neox(out_dir: str | Path, spec: NeoxSpec | None = None) -> Path:
    """Train (or reuse, when the same spec is already there) the model; returns its HF directory."""
    spec = spec or NeoxSpec()
    out = Path(out_dir)
    if built(out / "neox_spec.json", spec):
        return out
    docs = documents(spec)
    tokenizer = train_tokenizer(docs, spec.vocab_size)
    return save(out, out / "neox_spec.json", spec, train_model(tokenizer, docs, spec), tokenizer)
