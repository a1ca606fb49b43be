"""The uncounted fixed prefix (BOS, chat template, system prompt, instruction) run through the model once,
its keys and values handed to every GCG forward instead of recomputing them (as nanoGCG does).

Every candidate of every target shares the prefix, and causal attention makes its keys and values
independent of anything after it, so a forward of [free][suffix][target] over the cached prefix gives
the logits a forward of the whole input gives, to float rounding (positions continue from the prefix's
length: the model derives them from the cache's length). The cache is expanded over a forward's rows as
views; the model's first update copies them into the keys and values the forward appends to, so the
cached tensors are never written.

Used only where it pays and holds: a prefix of MIN_TOKENS or more (a lone BOS saves one position of
the input and costs the copies), no sliding-window attention (its cache layers crop what they keep by
their own rules), and a model whose logits with the cache match its logits without it (checked once on
the model itself; a family whose forward takes no cache, or handles one its own way, fails the check
and recomputes the prefix, logged).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

log = logging.getLogger(__name__)

MIN_TOKENS = 2
PROBE = 8  # tokens after the prefix in the one-time check


@dataclass(frozen=True)
class PrefixCache:
    layers: tuple[tuple[torch.Tensor, torch.Tensor], ...]  # per layer: keys, values [1, heads, P, d]
    tokens: int

    def expanded(self, rows: int):
        """A fresh DynamicCache of the prefix for a forward of `rows` rows (the forward appends to it)."""
        from transformers import DynamicCache

        return DynamicCache(
            [(k.expand(rows, -1, -1, -1), v.expand(rows, -1, -1, -1)) for k, v in self.layers]
        )


@torch.no_grad()
def compute(model, prefix_ids: list[int]) -> PrefixCache:
    ids = torch.tensor([prefix_ids], device=model.device)
    cache = model(input_ids=ids, use_cache=True).past_key_values
    return PrefixCache(tuple((k.detach(), v.detach()) for k, v, *_ in cache), len(prefix_ids))


def why_not(model, prefix_ids: list[int], window: int | None, probe_ids: list[int]) -> str | None:
    """Why the prefix is recomputed on this model (None: it is cached)."""
    if len(prefix_ids) < MIN_TOKENS:
        return f"a prefix of {len(prefix_ids)} token(s) saves less than the cache's copies cost"
    if window is not None:
        return f"sliding-window attention ({window}): its cache layers keep positions by their own rules"
    try:
        return (
            None
            if _agrees(model, prefix_ids, probe_ids[:PROBE])
            else "logits with the cache differ from logits without it"
        )
    except Exception as err:  # a family whose forward takes no cache of this kind
        return f"the model's forward refused a prefix cache ({type(err).__name__}: {err})"


@torch.no_grad()
def _agrees(model, prefix_ids: list[int], probe_ids: list[int]) -> bool:
    whole = torch.tensor([prefix_ids + probe_ids], device=model.device)
    want = model(input_ids=whole, use_cache=False).logits[:, len(prefix_ids) :].float()
    cache = compute(model, prefix_ids).expanded(1)
    got = model(input_ids=whole[:, len(prefix_ids) :], past_key_values=cache, use_cache=True).logits.float()
    # rounding apart (a few units in the last place of half precision); a cache misplaced by even one
    # position moves logits far more
    tol, scale = max(1e-3, 4 * torch.finfo(model.dtype).eps), float(want.abs().max())
    return got.shape == want.shape and bool(torch.allclose(got, want, rtol=tol, atol=tol * scale))
