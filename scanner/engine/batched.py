"""Candidate scoring, of one target or of several in one forward (search/driver.py): rows right-padded
into one batch, the LM head on each row's target positions only, gathered into one contiguous matrix
(HF's `logits_to_keep` hands the head a strided slice, whose GEMM ran at ~240 TFLOP/s against ~740
for the body's on an H200: bench/gpu/RESULTS.md).

Right padding needs no attention mask: attention is causal, so pad tokens after a row's last real
token cannot change any real position, and position ids stay 0..L-1. The model is split into body
(`base_model`: embeddings, layers, final norm) and head (output embeddings); `supported` checks once,
on the model itself, that the head of the body's states is its logits. Models that scale or cap
logits outside the head fail the check and run one target per forward, with `logits_to_keep`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from scanner.engine.hf import HFEngine
from scanner.engine.losses import exact_match, target_loss, tokens_right

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Scores:
    loss: torch.Tensor  # [B] float32, cpu
    exact: torch.Tensor  # [B] bool, cpu: teacher-forced greedy reproduces the target
    right: torch.Tensor  # [B] int, cpu: target tokens that teacher-forced greedy gets right


class TargetScorer:
    """One target bound to the engine: gradient and batched scores of free-token prompts."""

    def __init__(self, engine: HFEngine, target_ids: list[int], loss: str):
        self.engine, self.loss = engine, loss
        dev = engine.device
        self.target = torch.tensor(target_ids, device=dev)
        self.prefix = torch.tensor(engine.template.prefix_ids, dtype=torch.long, device=dev)
        self.suffix = torch.tensor(engine.template.suffix_ids, dtype=torch.long, device=dev)
        # The prefix's keys and values but its last token's, computed once per engine (engine/prefix.py);
        # forwards are fed the rest, and positions below count from the first token fed.
        self.cache = engine.prefix_cache()
        self.fed = self.prefix if self.cache is None else self.prefix[self.cache.tokens :]
        self.draft: TargetScorer | None = None  # the same target on the draft model (probe sampling)

    @property
    def keep(self) -> int:
        return self.target.numel() + 1

    def start(self, n: int) -> int:
        """The position (of the tokens fed) whose logits predict the first target token, after a prompt of n tokens."""
        return self.fed.numel() + n + self.suffix.numel() - 1

    def past(self, rows: int) -> dict:
        """The forward's keyword arguments for the cached prefix over `rows` rows (none when recomputed)."""
        return {} if self.cache is None else {"past_key_values": self.cache.expanded(rows)}

    def embedded(self, prompt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The prompt's one-hot [n, V] (requires grad) and the embeddings [L, H] of the input fed (the
        prefix left out when cached)."""
        weight = self.engine.model.get_input_embeddings().weight
        one_hot = torch.zeros(prompt.numel(), weight.shape[0], dtype=weight.dtype, device=weight.device)
        one_hot.scatter_(1, prompt.view(-1, 1), 1.0).requires_grad_(True)
        parts = [weight[self.fed], one_hot @ weight, weight[self.suffix], weight[self.target]]
        return one_hot, torch.cat(parts)

    def masked(self, grad: torch.Tensor) -> torch.Tensor:
        """The one-hot gradient as float32, disallowed ids at +inf (never drawn)."""
        return grad.float().masked_fill(~self.engine.allowed_mask, float("inf"))

    def gradient(self, prompt: torch.Tensor) -> tuple[torch.Tensor, float, bool]:
        """d loss / d one-hot prompt [n, V] (disallowed ids set to +inf), the loss and its exact match."""
        with torch.enable_grad():
            one_hot, embeds = self.embedded(prompt)
            logits = self.engine.logits(inputs_embeds=embeds[None], keep=self.keep, **self.past(1))[:, :-1]
            loss = target_loss(logits, self.target, self.loss)[0]
            (grad,) = torch.autograd.grad(loss, one_hot)
        return self.masked(grad), loss.item(), bool(exact_match(logits.detach(), self.target)[0])

    def sequences(self, prompts: torch.Tensor) -> torch.Tensor:
        b = prompts.shape[0]
        fixed = [t.expand(b, -1) for t in (self.fed, self.suffix, self.target)]
        return torch.cat([fixed[0], prompts.to(self.target.device), fixed[1], fixed[2]], dim=1)

    def score(self, prompts: torch.Tensor) -> Scores:
        """Loss and teacher-forced exact match of every prompt [B, n], in memory-sized chunks."""
        return scores(self.engine, [(self, prompts)])[0]  # one scoring loop for one target and for several


def initial_chunk(engine: HFEngine, shape: torch.Size, keep: int) -> int:
    """Candidates per forward from free GPU memory: activations of one sequence plus its fp32 logits."""
    batch, length = shape
    if not str(engine.device).startswith("cuda"):
        return batch
    config = engine.model.config.get_text_config()
    hidden = config.hidden_size
    inter = getattr(config, "intermediate_size", 4 * hidden) or 4 * hidden
    vocab = engine.model.get_input_embeddings().weight.shape[0]
    per_seq = length * (6 * hidden + 3 * inter) * 2 + keep * vocab * 12
    free, _ = torch.cuda.mem_get_info(engine.device)
    return max(1, min(batch, int(0.7 * free / per_seq)))


# Auto width on a GPU: targets per forward ~ this many parameters / the model's, at most MAX_AUTO.
# A 135M model gets 8 targets, 360M 5, 1B and up one. A first guess: bench/search/gcg_step.py --widths
# measures it on the GPU (bench/gpu/RESULTS.md).
AUTO_PARAMETERS = 2e9
MAX_AUTO = 8


def width(engine: HFEngine, asked: int) -> int:
    """Targets per forward: `asked` when > 0; auto (0): one on the CPU, where a forward is already
    compute-bound and candidate logits are not chunked, else by model size."""
    if asked > 0:
        return asked
    if not str(engine.device).startswith("cuda"):
        return 1
    parameters = sum(p.numel() for p in engine.model.parameters())
    return max(1, min(MAX_AUTO, int(AUTO_PARAMETERS // parameters)))


def supported(engine: HFEngine) -> bool:
    if engine.batchable is None:
        engine.batchable = _check(engine)
    return engine.batchable


@torch.no_grad()
def _check(engine: HFEngine) -> bool:
    body, head = engine.model.base_model, engine.model.get_output_embeddings()
    if head is None or body is engine.model:
        return False
    ids = torch.tensor([engine.allowed_ids[:8]], device=engine.device)
    try:
        want = engine.model(input_ids=ids, use_cache=False).logits.float()
        got = head(body(input_ids=ids, use_cache=False).last_hidden_state).float()
    except Exception as err:  # a model whose parts do not take these arguments
        log.info("no batching of targets: %s", err)
        return False
    # The same kernels on the same tensors: equal but for rounding; a scale or cap shows far above it.
    return got.shape == want.shape and bool(
        torch.allclose(got, want, rtol=1e-4, atol=1e-4 * float(want.abs().max()))
    )


def _head_logits(
    engine: HFEngine, hidden: torch.Tensor, spans: list[tuple[int, int, int, int]]
) -> list[torch.Tensor]:
    """[b, T, V] logits per (first row, rows, start, T): one head matmul over all target states."""
    size = hidden.shape[-1]
    states = torch.cat([hidden[r : r + b, s : s + t].reshape(-1, size) for r, b, s, t in spans])
    logits = engine.model.get_output_embeddings()(states)
    return [
        part.view(b, t, -1)
        for part, (_, b, _, t) in zip(logits.split([b * t for _, b, _, t in spans]), spans, strict=True)
    ]


def _body(engine: HFEngine, scorer: TargetScorer, **inputs) -> torch.Tensor:
    """[B, L, H] states of the body (engine.prefix_cache: every scorer of one engine shares it)."""
    rows = next(iter(inputs.values())).shape[0]
    past = scorer.past(rows)
    return engine.model.base_model(**inputs, **past, use_cache=bool(past)).last_hidden_state


def gradients(
    engine: HFEngine, items: list[tuple[TargetScorer, torch.Tensor]]
) -> list[tuple[torch.Tensor, float, bool]]:
    """scorer.gradient of every (scorer, prompt [n]) from one forward and backward of all of them."""
    with torch.enable_grad():
        pieces = [scorer.embedded(prompt.to(engine.device)) for scorer, prompt in items]
        length = max(e.shape[0] for _, e in pieces)
        embeds = torch.stack([F.pad(e, (0, 0, 0, length - e.shape[0])) for _, e in pieces])
        hidden = _body(engine, items[0][0], inputs_embeds=embeds)
        spans = [(i, 1, s.start(p.numel()), s.target.numel()) for i, (s, p) in enumerate(items)]
        logits = _head_logits(engine, hidden, spans)
        losses = [target_loss(lg, s.target, s.loss)[0] for lg, (s, _) in zip(logits, items, strict=True)]
        grads = torch.autograd.grad(torch.stack(losses).sum(), [one_hot for one_hot, _ in pieces])
    engine.forwards += len(items)
    return [
        (s.masked(g), loss.item(), bool(exact_match(lg.detach(), s.target)[0]))
        for (s, _), g, loss, lg in zip(items, grads, losses, logits, strict=True)
    ]


@torch.no_grad()
def scores(engine: HFEngine, items: list[tuple[TargetScorer, torch.Tensor]]) -> list[Scores]:
    """Loss, exact match and target tokens right of every (scorer, candidates [B, n]), all rows in memory-sized chunks
    (halved on out-of-memory, no gc.collect: 0.24 s a call on an H200); longest rows first so each
    chunk pads to little more than its own rows. Several items need `supported(engine)`."""
    if len(items) > 1 and not supported(engine):
        raise ValueError("several targets per forward need a model whose logits are head(body(x))")
    seqs = [scorer.sequences(c) for scorer, c in items]
    order = sorted(range(len(items)), key=lambda j: -seqs[j].shape[1])
    total = sum(s.shape[0] for s in seqs)
    keep = max(s.target.numel() for s, _ in items) + 1
    length = seqs[order[0]].shape[1]
    chunk = engine.chunk_size or _below_ceiling(
        engine, initial_chunk(engine, torch.Size((total, length)), keep), length
    )
    losses, right = [[] for _ in items], [[] for _ in items]
    start, halved = 0, False
    while start < total:
        parts = _segments(order, [seqs[j].shape[0] for j in order], start, min(start + chunk, total))
        try:
            results = _score_chunk(engine, items, seqs, parts)
        except torch.OutOfMemoryError:
            if chunk == 1:
                raise
            chunk, halved = max(chunk // 2, 1), True
            log.warning("out of memory: candidate chunk halved to %d", chunk)
            continue
        for j, loss, count in results:
            losses[j].append(loss)
            right[j].append(count)
        start += chunk
    _learn(engine, chunk * length if halved else None)
    return [
        Scores(loss=torch.cat(a), exact=torch.cat(b) == items[j][0].target.numel(), right=torch.cat(b))
        for j, (a, b) in enumerate(zip(losses, right, strict=True))
    ]


# A chunk that ran out of memory at N tokens would again: later calls start below N tokens (their rows
# scaled to their own length). After RELAX_AFTER calls without one the ceiling is dropped, so that a
# passing shortage (another process's memory) does not shrink every chunk of a long scan.
RELAX_AFTER = 64


def _below_ceiling(engine: HFEngine, chunk: int, length: int) -> int:
    ceiling = engine.oom_ceiling
    return chunk if ceiling is None else max(1, min(chunk, ceiling[0] // length))


def _learn(engine: HFEngine, fitted_tokens: int | None) -> None:
    """Record the tokens a chunk fit in after running out of memory, or count a call that needed no halving."""
    if fitted_tokens is not None:
        engine.oom_ceiling = (fitted_tokens, 0)
    elif engine.oom_ceiling is not None:
        tokens, calls = engine.oom_ceiling
        engine.oom_ceiling = None if calls + 1 >= RELAX_AFTER else (tokens, calls + 1)


def _segments(order: list[int], sizes: list[int], lo: int, hi: int) -> list[tuple[int, int, int]]:
    """(item, first row, end row) of the rows lo..hi of the items laid end to end in `order`."""
    parts, offset = [], 0
    for j, size in zip(order, sizes, strict=True):
        a, b = max(lo, offset), min(hi, offset + size)
        if a < b:
            parts.append((j, a - offset, b - offset))
        offset += size
    return parts


def _score_chunk(engine: HFEngine, items, seqs, parts) -> list[tuple[int, torch.Tensor, torch.Tensor]]:
    out = []
    for (j, _, _), logits in zip(parts, _chunk_logits(engine, items, seqs, parts), strict=True):
        target, kind = items[j][0].target, items[j][0].loss
        out.append((j, target_loss(logits, target, kind).float().cpu(), tokens_right(logits, target).cpu()))
    return out


def _chunk_logits(engine: HFEngine, items, seqs, parts) -> list[torch.Tensor]:
    """[rows, T, V] target-position logits of each part of a chunk."""
    if not supported(engine):  # one target: the model's own logits of its last positions
        (j, a, b), scorer = parts[0], items[parts[0][0]][0]
        return [engine.logits(seqs[j][a:b], keep=scorer.keep, **scorer.past(b - a))[:, :-1]]
    length = max(seqs[j].shape[1] for j, _, _ in parts)
    pad = engine.allowed_ids[0]  # any id: nothing real attends to it
    ids = torch.cat([F.pad(seqs[j][a:b], (0, length - seqs[j].shape[1]), value=pad) for j, a, b in parts])
    hidden = _body(engine, items[parts[0][0]][0], input_ids=ids)
    spans, row = [], 0
    for j, a, b in parts:
        scorer, candidates = items[j]
        spans.append((row, b - a, scorer.start(candidates.shape[1]), scorer.target.numel()))
        row += b - a
    engine.forwards += row
    return _head_logits(engine, hidden, spans)
