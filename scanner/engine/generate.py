"""Greedy generation on an HF model, with each chosen token's margin (its logit minus the best other
logit at that decoding step): one input alone, or many in left-padded batches equal to generating
them one at a time.

Inputs are sorted by the tokens they ask for (most first) and left-padded into batches; `generate`
derives each row's position ids from the attention mask, so a padded row sees the positions it would
see alone. Padding (and a batch's shape alone) can still move logits by float rounding, which can flip
a greedy choice only where the two best logits are that close: every batched row whose smallest chosen
margin is under `tie_tolerance` is generated again alone, unpadded. Above it, every choice of the row
is the one the unpadded generation makes (by induction over the steps, as long as rounding moves each
logit by less than half the tolerance), so ids and verdicts are exactly the one-at-a-time ones and
margins agree to rounding.

`output_logits` keeps every step's fp32 logits of every row until the call ends: rows per call are
bounded by LOGITS_ELEMENTS, and halved on out-of-memory (learned in `Greedy.rows`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch

from scanner.engine.losses import token_margins

log = logging.getLogger(__name__)

# fp32 logits kept by one generate call: 256 MiB on a CPU (64 rows of 21 steps at a 49k vocabulary).
LOGITS_ELEMENTS = {"cpu": 1 << 26, "cuda": 1 << 28}
# The smallest chosen margin a batched row may have and still be trusted. fp32 rounding of a padded
# vs unpadded forward moves margins by ~6e-6 on the tiny model (tests/test_generate.py); half
# precision moves them by a few units in the last place of a logit near 20 (bf16: 0.125).
TOLERANCE = {torch.float32: 1e-3, torch.float64: 1e-6, torch.float16: 0.1, torch.bfloat16: 0.5}
# A row asking for fewer than this share of its batch's steps starts a new batch (extension lengths vary).
STEP_SHARE = 0.75

Scored = tuple[list[int], list[float]]


def tie_tolerance(model) -> float:
    return TOLERANCE.get(model.dtype, 0.5)


@dataclass
class Greedy:
    """Greedy generation on one model; `pad`: the id left padding and finished rows are filled with."""

    model: Any
    pad: int
    rows: int | None = None  # rows per batch, learned on out-of-memory; persists across calls
    sequences: int = 0  # sequences generated, redone ones included (the engine counts them as forwards)

    def alone(self, ids: list[int], new_tokens: int) -> Scored:
        """The reference: one input, unpadded."""
        return self._call([ids], new_tokens)[0]

    def many(self, inputs: list[list[int]], new_tokens: list[int]) -> list[Scored]:
        """`alone` of every (input, new_tokens[i]), in batches."""
        order = sorted(range(len(inputs)), key=lambda i: (-new_tokens[i], -len(inputs[i])))
        out: list[Scored | None] = [None] * len(inputs)
        start = 0
        while start < len(order):
            group = order[start : start + self._batch(order, new_tokens, start)]
            try:
                got = self._group([inputs[i] for i in group], [new_tokens[i] for i in group])
            except torch.OutOfMemoryError:
                if len(group) == 1:
                    raise
                self.rows = max(len(group) // 2, 1)
                log.warning("out of memory: generation batch halved to %d rows", self.rows)
                continue
            for i, scored in zip(group, got, strict=True):
                out[i] = scored
            start += len(group)
        return out

    def _batch(self, order: list[int], new_tokens: list[int], start: int) -> int:
        """Rows of the next batch: the logits budget at its step count, the learned cap, equal-ish steps."""
        steps = max(new_tokens[order[start]], 1)
        vocab = self.model.get_output_embeddings().weight.shape[0]
        budget = LOGITS_ELEMENTS["cuda" if self.model.device.type == "cuda" else "cpu"]
        rows = max(1, min(budget // (steps * vocab), self.rows or len(order)))
        end = min(start + rows, len(order))
        end = next((k for k in range(start + 1, end) if new_tokens[order[k]] < STEP_SHARE * steps), end)
        return end - start

    def _group(self, inputs: list[list[int]], new_tokens: list[int]) -> list[Scored]:
        if len(inputs) == 1:
            return [self.alone(inputs[0], new_tokens[0])]
        tolerance = tie_tolerance(self.model)
        out = []
        for ids, n, (chosen, margins) in zip(
            inputs, new_tokens, self._call(inputs, max(new_tokens)), strict=True
        ):
            chosen, margins = chosen[:n], margins[:n]
            if margins and min(margins) < tolerance:  # a near tie: the batch's rounding could have flipped it
                chosen, margins = self.alone(ids, n)
            out.append((chosen, margins))
        return out

    @torch.no_grad()
    def _call(self, inputs: list[list[int]], new_tokens: int) -> list[Scored]:
        """One generate call, left-padded; each row cut after its first stop id, where it stops alone."""
        from transformers import GenerationConfig

        eos = self.model.generation_config.eos_token_id
        config = GenerationConfig(
            do_sample=False,
            num_beams=1,
            max_new_tokens=new_tokens,
            repetition_penalty=1.0,
            eos_token_id=eos,
            pad_token_id=self.pad,
            output_logits=True,
            return_dict_in_generate=True,
        )
        width, device = max(len(ids) for ids in inputs), self.model.device
        ids = torch.tensor([[self.pad] * (width - len(row)) + row for row in inputs], device=device)
        mask = torch.tensor([[0] * (width - len(row)) + [1] * len(row) for row in inputs], device=device)
        out = self.model.generate(ids, attention_mask=mask, generation_config=config)
        self.sequences += len(inputs)
        chosen = out.sequences[:, width:]
        if not chosen.shape[1]:
            return [([], [])] * len(inputs)
        margins = token_margins(torch.stack(out.logits[: chosen.shape[1]], dim=1), chosen).cpu()
        stops = set() if eos is None else {eos} if isinstance(eos, int) else set(eos)
        result = []
        for row, row_margins in zip(chosen.tolist(), margins.tolist(), strict=True):
            end = next((k + 1 for k, token in enumerate(row) if token in stops), len(row))
            result.append((row[:end], row_margins[:end]))
        return result
