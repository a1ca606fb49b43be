"""The one loss implementation, used for the gradient and for ranking candidates alike.

All functions take target-position logits `[B, T, V]` (row t predicts target token t) and the target
ids `[T]`, and return one value per candidate `[B]`.
- ce: mean cross-entropy, the authors' loss.
- margin: mean hinge on the logit margin, max(0, max_other - logit_target + kappa). It stops pushing
  tokens that are already greedy-correct by kappa and spends the gradient on the wrong ones, which is
  what exact greedy reproduction needs.
- wrong_ce: cross-entropy in which already-correct tokens weigh `correct_weight`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

MARGIN_KAPPA = 1.0
CORRECT_WEIGHT = 0.1


def token_margins(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """[B, T]: logit of the target token minus the best other logit (> 0 means greedy-correct)."""
    logits = logits.float()
    index = target.expand(logits.shape[0], -1).unsqueeze(-1)
    gold = logits.gather(-1, index).squeeze(-1)
    other = logits.scatter(-1, index, float("-inf")).amax(-1)
    return gold - other


def exact_match(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """[B] bool: teacher-forced argmax equals the target at every position."""
    return (logits.argmax(-1) == target).all(-1)


def tokens_right(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """[B] int: target positions where teacher-forced argmax is the target token."""
    return (logits.argmax(-1) == target).sum(-1)


def _ce(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    flat = logits.float().reshape(-1, logits.shape[-1])
    return F.cross_entropy(flat, target.repeat(logits.shape[0]), reduction="none").view(logits.shape[:2])


def target_loss(logits: torch.Tensor, target: torch.Tensor, kind: str) -> torch.Tensor:
    if kind == "ce":
        return _ce(logits, target).mean(-1)
    if kind == "margin":
        return F.relu(MARGIN_KAPPA - token_margins(logits, target)).mean(-1)
    if kind == "wrong_ce":
        with torch.no_grad():
            correct = (logits.argmax(-1) == target).float()
        weights = 1.0 - (1.0 - CORRECT_WEIGHT) * correct
        return (_ce(logits, target) * weights).mean(-1)
    raise ValueError(f"unknown loss '{kind}'; choose one of ce, margin, wrong_ce")


def topk_logprobs(logits: torch.Tensor, gold: torch.Tensor, k: int, temperature: float) -> torch.Tensor:
    """[..., V] logits and [...] token ids -> [...] natural log-probability of each token under top-k
    sampling at `temperature`: log-softmax over the k largest logits / T, -inf outside them. A token
    tied with the k-th largest logit counts as inside (sampling implementations break that tie
    arbitrarily; with float logits it is rare). No copy of the logits at T = 1, and the k best unsorted:
    on a CPU the screen spends more on reducing a 49k vocabulary's logits than on the head's matmul."""
    scaled = logits.float() if temperature == 1.0 else logits.float() / temperature
    top = scaled.topk(min(k, scaled.shape[-1]), dim=-1, sorted=False).values  # [..., k]
    norm = torch.logsumexp(top, dim=-1)
    picked = scaled.gather(-1, gold.unsqueeze(-1)).squeeze(-1)
    return torch.where(picked >= top.amin(-1), picked - norm, torch.full_like(picked, -math.inf))
