"""Teacher-forced scores of many token sequences in bounded memory: for the last `tail` tokens of each,
whether the token is the model's argmax, its negative log-likelihood and, for the rows that ask, its
log-probability under top-k sampling (scanner/measures/extraction.py).

Rows are sorted by length, longest first, and right-padded into batches of `max_rows` (causal attention:
pad tokens after a row's last real token change nothing before it, so no mask, positions 0..L-1). The LM
head runs on the scored positions only, `head_slice` positions at a time, and each slice of logits is
reduced to three numbers per position before the next one is computed: peak memory is one batch's hidden
states plus one slice of fp32 logits, never a document's [rows, T, vocabulary] (which, at a 49k
vocabulary and 256 rows of 33 positions, is 1.6 GB before log-softmax doubles it). Models whose logits
are not head(body(x)) (engine/batched.py `supported`) take `engine.logits` per batch, with batches
shrunk to the same logits budget (at least one row).

With vLLM attached as the screener the rows go to it in one call, unpadded (VLLMEngine.prompt_scores).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from scanner.config import ExtractionConfig, ScreenConfig
from scanner.engine import batched
from scanner.engine.hf import HFEngine
from scanner.engine.losses import topk_logprobs
from scanner.engine.token_scores import TokenScores
from scanner.errors import require

# fp32 logits per head slice: 64 MiB on a CPU (341 positions of a 49k vocabulary), 1 GiB on a GPU,
# where bigger matmuls pay; log-softmax and top-k take about twice that again while a slice is reduced.
HEAD_ELEMENTS = {"cpu": 1 << 24, "cuda": 1 << 28}


@dataclass(frozen=True)
class Scored:
    rows: list[TokenScores]  # in the order the sequences were given
    padded_tokens: int  # tokens the forwards ran, padding included (equal to the real tokens under vLLM)


def head_slice(engine: HFEngine) -> int:
    """Positions whose logits are computed at once."""
    vocab = engine.model.get_output_embeddings().weight.shape[0]
    budget = HEAD_ELEMENTS["cuda" if str(engine.device).startswith("cuda") else "cpu"]
    return max(1, budget // vocab)


def teacher_scores(
    engine: HFEngine, seqs: list[list[int]], tails: list[int], topk_rows: list[bool], config: ScreenConfig
) -> Scored:
    """Scores of the last tails[i] tokens of seqs[i] (each predicted by the position before it), in
    forwards of at most config.max_rows rows and config.batch_tokens tokens (padding included)."""
    require(
        all(0 < t < len(s) for s, t in zip(seqs, tails, strict=True)),
        "a document's first token has no position before it to be predicted from: this template has no "
        "prefix (BOS or document separator); pass --bos auto",
    )
    extraction = config.extraction
    if not seqs:
        return Scored([], 0)
    if engine.screener is not None:
        engine.forwards += len(seqs)
        rows = engine.screener.prompt_scores(
            seqs, tails, topk_rows, top_k=extraction.top_k, temperature=extraction.temperature
        )
        return Scored(rows, sum(len(s) for s in seqs))
    order = sorted(range(len(seqs)), key=lambda i: -len(seqs[i]))
    out: list[TokenScores | None] = [None] * len(seqs)
    split = batched.supported(engine)
    padded = 0
    for part in _batches(engine, [len(seqs[i]) for i in order], config, split):
        rows = [order[k] for k in part]
        got = _batch(
            engine,
            [seqs[i] for i in rows],
            [tails[i] for i in rows],
            [topk_rows[i] for i in rows],
            extraction,
            split,
        )
        padded += len(rows) * len(seqs[rows[0]])
        for i, scores in zip(rows, got, strict=True):
            out[i] = scores
    return Scored(out, padded)


def _batches(engine: HFEngine, lengths: list[int], config: ScreenConfig, split: bool) -> list[range]:
    """Consecutive index ranges of rows (longest first) per forward: at most max_rows rows and
    batch_tokens tokens, and when the model's own logits of every position are needed (not `split`), as
    many rows as the logits budget holds (always at least one)."""
    out, start = [], 0
    while start < len(lengths):
        rows = min(config.max_rows, config.batch_tokens // lengths[start])
        rows = max(1, rows if split else min(rows, head_slice(engine) // lengths[start]))
        end = min(start + rows, len(lengths))
        # a row under 3/4 of the longest starts the next batch: a document's short last chunk, or
        # certificate rows of another length, are not padded to the longest
        end = next((i for i in range(start + 1, end) if 4 * lengths[i] < 3 * lengths[start]), end)
        out.append(range(start, end))
        start = end
    return out


@torch.no_grad()
def _batch(
    engine: HFEngine,
    seqs: list[list[int]],
    tails: list[int],
    topk: list[bool],
    extraction: ExtractionConfig,
    split: bool,
) -> list[TokenScores]:
    width = len(seqs[0])
    pad = engine.allowed_ids[0] if engine.allowed_ids else 0  # any id: nothing real attends to it
    ids = torch.tensor([s + [pad] * (width - len(s)) for s in seqs], device=engine.device)
    gold = torch.cat([ids[r, len(s) - t : len(s)] for r, (s, t) in enumerate(zip(seqs, tails, strict=True))])
    asked = torch.cat([torch.full((t,), a, dtype=torch.bool) for t, a in zip(tails, topk, strict=True)])
    if split:
        hidden = engine.model.base_model(input_ids=ids, use_cache=False).last_hidden_state
        engine.forwards += len(seqs)
        states = torch.cat(
            [hidden[r, len(s) - t - 1 : len(s) - 1] for r, (s, t) in enumerate(zip(seqs, tails, strict=True))]
        )
        matches, nll, top = _reduce(
            engine.model.get_output_embeddings(), states, gold, asked, extraction, head_slice(engine)
        )
    else:
        logits = engine.logits(ids)
        picked = torch.cat(
            [logits[r, len(s) - t - 1 : len(s) - 1] for r, (s, t) in enumerate(zip(seqs, tails, strict=True))]
        )
        matches, nll, top = _reduce(lambda x: x, picked, gold, asked, extraction, len(picked))
    return _split_rows(matches, nll, top, tails, topk)


def _reduce(
    head,
    states: torch.Tensor,
    gold: torch.Tensor,
    asked: torch.Tensor,
    extraction: ExtractionConfig,
    step: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """[P] matches, NLL and top-k log-probs (NaN where not asked) of `states` [P, H] through `head`,
    `step` positions at a time."""
    matches = torch.empty(len(gold), dtype=torch.bool)
    nll = torch.empty(len(gold), dtype=torch.float32)
    top = torch.full((len(gold),), float("nan"), dtype=torch.float64)
    asked = asked.to(gold.device)
    for a in range(0, len(gold), step):
        logits, want = head(states[a : a + step]).float(), gold[a : a + step]
        # max's indices are argmax's (the first of tied maxima) at half its cost on a CPU
        matches[a : a + step] = (logits.max(-1).indices == want).cpu()
        nll[a : a + step] = F.cross_entropy(logits, want, reduction="none").cpu()
        where = asked[a : a + step]
        if bool(where.all()):  # a streamed chunk: every position, no copy of the logits
            top[a : a + step] = (
                topk_logprobs(logits, want, extraction.top_k, extraction.temperature).double().cpu()
            )
        elif bool(where.any()):
            values = topk_logprobs(logits[where], want[where], extraction.top_k, extraction.temperature)
            top[a : a + step][where.cpu()] = values.double().cpu()
        del logits
    return matches, nll, top


def _split_rows(matches, nll, top, tails: list[int], topk: list[bool]) -> list[TokenScores]:
    out, a = [], 0
    for t, asked in zip(tails, topk, strict=True):
        out.append(TokenScores(matches[a : a + t], nll[a : a + t], top[a : a + t] if asked else None))
        a += t
    return out
