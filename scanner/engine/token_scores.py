"""One row's teacher-forced scores, as both screening engines return them (engine/teacher.py for HF,
engine/vllm.py's prompt_scores), in a module of its own so neither engine imports the other."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TokenScores:
    """One row's scored tokens."""

    matches: torch.Tensor  # [n] bool: the token is the argmax
    nll: torch.Tensor  # [n] float32
    topk: torch.Tensor | None  # [n] float64: log-prob under top-k sampling; None where not asked
