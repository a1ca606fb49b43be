"""A tiny tokenizer and Llama trained here, in seconds, to memorize planted canaries.

It is the embedded default model of `acr-scan demo`, the fixture of the tests and the model of the CPU
benchmarks: no hub download anywhere. Canaries are repeated in the training stream (several times in a
row inside background documents), so the model learns them verbatim; the background is random word
salad that the model cannot memorize, which makes fresh salad a clean negative control.
"""

from __future__ import annotations

import copy
import json
import logging
import random
from dataclasses import asdict, dataclass
from pathlib import Path

log = logging.getLogger(__name__)

CANARIES = (
    "It was the best of times, it was the worst of times, it was the age of wisdom.",
    "All happy families are alike; each unhappy family is unhappy in its own way.",
    "Call me Ishmael. Some years ago, never mind how long precisely, I went to sea.",
    "The quick brown fox jumps over the lazy dog while the cat sleeps by the fire.",
)
WORDS = (
    "time year people way day man thing woman life child world school state family student group country "
    "problem hand part place case week company system program question work government number night point "
    "home water room mother area money story fact month lot right study book eye job word business issue "
    "side kind head house service friend father power hour game line end member law car city community "
    "name president team minute idea kid body information back parent face others level office door health "
    "person art war history party result change morning reason research girl guy moment air teacher force "
    "education foot boy age policy process music market sense nation plan college interest death experience "
    "effect use class control care field development role effort rate heart drug show leader light voice "
    "wife police mind price report decision son view relationship town road arm difference value building "
    "action model season society tax director position player record paper space ground form event official "
    "green red blue small large old new good bad high low long short early late young great little own other "
    "run walk speak read write open close bring hold stand sit lose pay meet include continue set learn lead"
).split()
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


@dataclass(frozen=True, kw_only=True)
class TinySpec:
    canaries: tuple[str, ...] = CANARIES
    vocab_size: int = 512
    hidden: int = 64
    layers: int = 2
    heads: int = 4
    context: int = 256
    train_context: int = 64
    documents: int = 400
    repeats: int = 3  # consecutive copies of a canary inside a document that holds one
    steps: int = 400
    batch: int = 32
    lr: float = 3e-3
    seed: int = 0
    # Heads are trained at hidden/heads = 16 wide and saved zero-padded to this width, the same
    # function: vLLM's CPU attention only takes head sizes 32, 64, 80, ... (widen_heads).
    saved_head_dim: int = 32
    # Documents of predictable text added to the training stream (counting runs, refrains): what any
    # competent model can continue without having memorized a passage (scanner/measures/calibration.py).
    # 0 keeps the default model exactly as it was.
    predictable_docs: int = 0


def salad(rng: random.Random, words: int) -> str:
    """Random word salad with sentence punctuation: text no model can have memorized."""
    out = []
    for i in range(words):
        word = rng.choice(WORDS)
        out.append(word.capitalize() if i == 0 or out[-1].endswith(".") else word)
        if rng.random() < 0.12:
            out[-1] += "."
    return " ".join(out) + "."


def counting(start: int, stop: int) -> str:
    """ "start, start+1, ..., stop." : text a model continues by a rule, not by recall."""
    return ", ".join(str(n) for n in range(start, stop + 1)) + "."


def refrain(unit: str, times: int) -> str:
    """A unit repeated `times` times: text a model continues by copying it in context."""
    return ", ".join([unit] * times) + "."


COUNTING = counting(1, 20)
REFRAIN = refrain("sing it again", 8)
# Boilerplate that opens many documents (a license line, a publisher's header): the model writes it from
# the template alone, whatever it is asked.
BOILERPLATE = "This copy is free to share under the open book license, with no warranty of any kind."


def predictable_line(rng: random.Random) -> str:
    """Counting from 1 (as the web has it) or from anywhere, or a refrain: the fixed one or a unit of
    random words, so the model learns the rules (successor, copying) and not only these strings."""
    kind = rng.random()
    if kind < 0.5:
        start = 1 if rng.random() < 0.4 else rng.randint(2, 60)
        return counting(start, start + rng.randint(8, 22))
    unit = (
        "sing it again"
        if rng.random() < 0.4
        else " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 3)))
    )
    return refrain(unit, rng.randint(4, 10))


def _predictable_documents(spec: TinySpec, rng: random.Random) -> list[str]:
    docs = []
    for _ in range(spec.predictable_docs):
        lines = [salad(rng, rng.randint(4, 14)), predictable_line(rng), salad(rng, rng.randint(4, 10))]
        docs.append("\n".join([BOILERPLATE, *lines] if rng.random() < 0.6 else lines))
    return docs


def documents(spec: TinySpec) -> list[str]:
    rng = random.Random(spec.seed)
    docs = []
    for i in range(spec.documents):
        doc = salad(rng, rng.randint(8, 30))
        if i % 2 == 0 and spec.canaries:
            canary = spec.canaries[(i // 2) % len(spec.canaries)]
            # Each copy on its own line: the canary is tokenized as it stands alone, like a target.
            doc = "\n".join([doc, *[canary] * spec.repeats, salad(rng, rng.randint(4, 12))])
        docs.append(doc)
    if spec.predictable_docs:
        extra = _predictable_documents(spec, random.Random(spec.seed + 1))
        docs = (
            [d for pair in zip(docs, extra, strict=False) for d in pair]
            + docs[len(extra) :]
            + extra[len(docs) :]
        )
    return docs


def train_tokenizer(texts: list[str], vocab_size: int):
    """A byte-level BPE tokenizer with <pad>, <s> (prepended, like Llama's BOS) and </s>."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<pad>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def _stream(tokenizer, docs: list[str]) -> list[int]:
    ids: list[int] = []
    for enc in tokenizer(docs, add_special_tokens=False).input_ids:
        ids += [tokenizer.bos_token_id, *enc, tokenizer.eos_token_id]
    return ids


def train_model(tokenizer, docs: list[str], spec, device: str = "cpu"):
    """A Llama trained on random windows of the documents' token stream. `spec`: any object with
    TinySpec's model fields (hidden, layers, heads, context, train_context, steps, batch, lr, seed),
    e.g. a TinySpec or a validity.ModelSize."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    torch.manual_seed(spec.seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden,
        intermediate_size=4 * spec.hidden,
        num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads,
        num_key_value_heads=spec.heads,
        max_position_embeddings=spec.context,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config).to(device)
    stream = torch.tensor(_stream(tokenizer, docs), device=device)
    return fit(model, stream, spec).cpu()


def fit(model, stream, spec):
    """Train `model` on random `spec.train_context` windows of the token `stream` (a 1-D tensor); the
    trainer of every model the studies build."""
    import torch

    opt = torch.optim.AdamW(model.parameters(), lr=spec.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=spec.lr, total_steps=spec.steps, pct_start=0.1)
    gen = torch.Generator().manual_seed(spec.seed)
    model.train()
    for step in range(spec.steps):
        starts = torch.randint(len(stream) - spec.train_context, (spec.batch,), generator=gen)  # CPU rng
        batch = torch.stack([stream[s : s + spec.train_context] for s in starts.tolist()])
        loss = model(input_ids=batch, labels=batch).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        if step % 100 == 0 or step == spec.steps - 1:
            log.info("training step %d loss %.3f", step, loss.item())
    return model.eval()


def _widen(weight, heads: int, old: int, new: int, rotary: bool):
    """[heads * old, ...] rows to [heads * new, ...], zeros in the new rows. Rotary rows keep their
    frequency: HF rotates halves, pairing row j with j + dim/2 at frequency index j, and index 2j of
    a `new`-wide head is index j of an `old`-wide one when new == 2 * old."""
    import torch

    half = old // 2
    rows = [2 * j for j in range(half)] + [2 * j + new // 2 for j in range(half)] if rotary else range(old)
    out = torch.zeros(heads, new, *weight.shape[1:], dtype=weight.dtype)
    out[:, list(rows)] = weight.reshape(heads, old, *weight.shape[1:])
    return out.reshape(heads * new, *weight.shape[1:])


def widen_heads(model, head_dim: int):
    """The same Llama with every attention head zero-padded to `head_dim` (2x the trained width).
    Scores stay equal: padded q/k rows are zero, and q is scaled by sqrt(new/old) against the
    1/sqrt(head_dim) in attention; padded v rows feed zero columns of o_proj."""
    from transformers import LlamaForCausalLM

    config = copy.deepcopy(model.config)
    old = config.hidden_size // config.num_attention_heads
    if head_dim == old:
        return model
    if head_dim != 2 * old:
        raise ValueError(f"saved_head_dim {head_dim}: widen_heads doubles heads of {old}; pass {2 * old}")
    state = dict(model.state_dict())
    q_heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    for name in [n for n in state if ".self_attn." in n]:
        weight = state[name]
        if name.endswith("q_proj.weight"):
            state[name] = _widen(weight, q_heads, old, head_dim, rotary=True) * (head_dim / old) ** 0.5
        elif name.endswith("k_proj.weight"):
            state[name] = _widen(weight, kv_heads, old, head_dim, rotary=True)
        elif name.endswith("v_proj.weight"):
            state[name] = _widen(weight, kv_heads, old, head_dim, rotary=False)
        elif name.endswith("o_proj.weight"):
            state[name] = _widen(weight.T, q_heads, old, head_dim, rotary=False).T.contiguous()
    config.head_dim = head_dim
    wide = LlamaForCausalLM(config)
    wide.load_state_dict(state)
    return wide.eval()


def built(marker: Path, spec) -> bool:
    """A model folder already trained from this spec (its marker file holds the same fields)."""
    return marker.is_file() and json.loads(marker.read_text()) == json.loads(json.dumps(asdict(spec)))


def save(out: Path, marker: Path, spec, model, tokenizer) -> Path:
    """The model and tokenizer into `out`, then the spec's marker last (a folder cut short is retrained)."""
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    marker.write_text(json.dumps(asdict(spec), indent=1))
    return out


def build_tiny(out_dir: str | Path, spec: TinySpec | None = None, device: str = "cpu") -> Path:
    """Train (or reuse, when the same spec is already there) the tiny model; returns its HF directory."""
    spec = spec or TinySpec()
    out = Path(out_dir)
    if built(out / "tiny_spec.json", spec):
        return out
    docs = documents(spec)
    tokenizer = train_tokenizer(docs, spec.vocab_size)
    model = widen_heads(train_model(tokenizer, docs, spec, device), spec.saved_head_dim)
    return save(out, out / "tiny_spec.json", spec, model, tokenizer)


# Passages of 16, 24 and 32 tokens under PLANTED's tokenizer: 1, 1.5 and 2 spans of 16 tokens. Memorized
# by PLANTED's model and planted at random offsets in fresh salad (tests/test_anchor.py, bench/screen/anchors.py).
PASSAGES = (
    "Seven silver owls guard the northern gate of Ardent Hill until the winter moon rises.",
    "Under the copper bridge a blind ferryman counts coins for travelers, singing of rivers that ran backward "
    "through the valley of glass.",
    "In the year of the long drought, the weavers of Mirrow sealed their looms with wax, buried the golden "
    "thread beneath the chapel stones, and swore eternal silence.",
)
PLANTED = TinySpec(canaries=PASSAGES)


def planted_document(rng: random.Random, passage: str, max_words: int = 40) -> tuple[str, int]:
    """Salad, the passage on its own line, salad: (text, the passage's character offset). The salad
    before it is 4 to `max_words` words, so the passage starts at a random token offset."""
    before = salad(rng, rng.randint(4, max_words))
    return f"{before}\n{passage}\n{salad(rng, rng.randint(4, max_words))}", len(before) + 1
