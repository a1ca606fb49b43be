"""The streamed window pass: one causal pass over long chunks of a document gives every span's window
statistics (per-token greedy matches, NLL, top-k log-probs for p_z) at once, instead of one
[template][context][span] row per span, which encodes each corpus token twice (32-token spans and
context) or more (overlapping or anchored spans).

Chunk k is [template prefix][document tokens a_k .. a_k + chunk), a_k = k * (chunk - overlap), and it
scores the document positions [a_k + overlap, a_(k+1) + overlap) (chunk 0 from the document's start):
every position is read from exactly one chunk, fixed by the document alone, so spans screened in two
calls (windows, then anchored spans) read the same scores, computed once. With overlap = context_tokens
+ the span length, each token of a span is predicted from at least the context_tokens + offset document
tokens its exact window row gives it, or from the whole document before it near the start.

What changes against exact windows (ScreenConfig.window = "exact"): a span's statistics see between
context_tokens and chunk - span tokens of preceding text, not exactly context_tokens; where the two
contexts are the same (spans starting within context_tokens of the document's start) the scores are the
same up to float rounding. The template's suffix (chat mode) cannot sit between context and span in one
text, so a template with suffix tokens screens exact windows (ScreenConfig.window "auto").
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import torch

from scanner.config import ScreenConfig
from scanner.engine.hf import HFEngine
from scanner.engine.teacher import teacher_scores
from scanner.engine.token_scores import TokenScores
from scanner.errors import require

log = logging.getLogger(__name__)


def chunk_limit(engine: HFEngine, overlap: int) -> tuple[int | None, str]:
    """The most tokens a chunk may hold with the template's prefix, and why. The model's positions bound
    it. So does a sliding window (Mistral, Gemma, Phi-3): inside it every token of a chunk sees the whole
    chunk before it in every layer, local ones too, so a span's context is what window_info says it is.
    A window too short to advance a chunk by its overlap (context + span) is left to the positions: a
    cap there would forward every token more than twice."""
    limits = [(engine.max_positions, "positions")] if engine.max_positions else []
    window = engine.attention_window
    if window and window - len(engine.template.prefix_ids) >= 2 * overlap:
        limits.append((window, "sliding window"))
    return min(limits) if limits else (None, "")


def chunk_tokens(engine: HFEngine, config: ScreenConfig, overlap: int) -> int:
    """Document tokens per chunk: the configured length, within the model's positions and sliding window
    (chunk_limit); `overlap`: the context + span tokens each chunk re-reads from the one before."""
    room, _ = chunk_limit(engine, overlap)
    prefix = len(engine.template.prefix_ids)
    return config.chunk_tokens if room is None else min(config.chunk_tokens, room - prefix)


def resolve_window(engine: HFEngine, config: ScreenConfig) -> str:
    """exact or stream, as this engine screens with `config` ("auto": stream unless the template has a
    suffix between prompt and target)."""
    if config.window == "auto":
        return "exact" if engine.template.suffix_ids else "stream"
    require(
        config.window == "exact" or not engine.template.suffix_ids,
        "--screen-window stream reads a span right after the document text before it, but this template "
        "puts suffix tokens (chat mode) between them; pass --screen-window exact or auto",
    )
    return config.window


def window_info(engine: HFEngine, config: ScreenConfig, span_tokens: int) -> dict:
    """How this engine screens windows, as provenance records it: the resolved mode and the context a
    span's statistics see (exactly context_tokens, or from context_tokens up to the chunk); the model's
    positions and sliding window beside it."""
    window = resolve_window(engine, config)
    limits = {"positions": engine.max_positions, "sliding_window": engine.attention_window}
    if window == "exact":
        return {"window": "exact", "context_tokens": config.context_tokens, **limits}
    overlap = config.context_tokens + span_tokens
    chunk = chunk_tokens(engine, config, overlap)
    info = {
        "window": "stream",
        "context_tokens": config.context_tokens,
        "chunk_tokens": chunk,
        "context": "at least context_tokens + the token's offset in its span, up to chunk_tokens",
        **limits,
    }
    if chunk < config.chunk_tokens:  # capped: said once, where provenance records it
        room, why = chunk_limit(engine, overlap)
        log.info(
            "--chunk-tokens %d capped to %d: the model's %s is %d tokens, %d of them the template's prefix",
            config.chunk_tokens,
            chunk,
            why,
            room,
            room - chunk,
        )
        info.update(chunk_tokens_asked=config.chunk_tokens, chunk_capped_by=f"{why} ({room})")
    return info


@dataclass
class DocumentStream:
    """The streamed scores of one document's positions, computed chunk by chunk as spans ask for them."""

    ids: list[int]
    overlap: int  # context_tokens + the longest span: each scored token sees at least this much before it
    chunk: int  # document tokens per chunk
    chunks: dict[int, TokenScores] = field(default_factory=dict)  # by chunk index

    @property
    def step(self) -> int:
        return self.chunk - self.overlap

    def index(self, position: int) -> int:
        return max(0, (position - self.overlap) // self.step)

    def reads(self, k: int) -> tuple[int, int, int]:
        """(first input token, first scored token, end) of chunk k, as document positions."""
        start = k * self.step
        return start, 0 if k == 0 else start + self.overlap, min(start + self.chunk, len(self.ids))

    def missing(self, ranges: list[tuple[int, int]]) -> list[int]:
        """Chunk indices not yet scored that the document ranges [a, b) need."""
        need = {k for a, b in ranges for k in range(self.index(a), self.index(b - 1) + 1)}
        return sorted(need - self.chunks.keys())

    def window(self, a: int, b: int) -> TokenScores:
        """Scores of the document tokens [a, b), gathered from the chunks that read them."""
        parts = []
        for k in range(self.index(a), self.index(b - 1) + 1):
            _, lo, hi = self.reads(k)
            got, x, y = self.chunks[k], max(a, lo) - lo, min(b, hi) - lo
            parts.append((got.matches[x:y], got.nll[x:y], None if got.topk is None else got.topk[x:y]))
        return TokenScores(
            torch.cat([p[0] for p in parts]),
            torch.cat([p[1] for p in parts]),
            torch.cat([p[2] for p in parts]),
        )


def stream_windows(
    engine: HFEngine, stream: DocumentStream, ranges: list[tuple[int, int]], config: ScreenConfig
) -> tuple[list[TokenScores], tuple[list[int], int, int]]:
    """Window scores of each document range [a, b), and what was forwarded for them (ScreenWork.add's
    arguments): the lengths of the chunks, their padded tokens and their scored positions."""
    require(
        stream.chunk > stream.overlap,
        f"--chunk-tokens {stream.chunk} (within the model's positions) must exceed --context-tokens plus the "
        f"span length ({stream.overlap}); raise it, shorten the context, or pass --screen-window exact",
    )
    todo = stream.missing(ranges)
    prefix = list(engine.template.prefix_ids)
    seqs, tails = [], []
    for k in todo:
        start, lo, hi = stream.reads(k)
        seqs.append(prefix + stream.ids[start:hi])
        tails.append(hi - lo)
    scored = teacher_scores(engine, seqs, tails, [True] * len(seqs), config)
    stream.chunks.update(zip(todo, scored.rows, strict=True))
    return [stream.window(a, b) for a, b in ranges], (
        [len(s) for s in seqs],
        scored.padded_tokens,
        sum(tails),
    )
