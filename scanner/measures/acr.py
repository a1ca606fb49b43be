"""Pure ACR math: the ratio, the failure convention, thresholds and dataset aggregates.

ACR(M, y) = |y| / |x*| with x* the shortest prompt found that makes greedy decoding reproduce y.
Conventions (documented because the authors' scripts disagreed with each other):
- a target for which no verified prompt was found scores |y| / cap (cap = the longest length the
  search allowed, 5|y| by default) and is never memorized;
- an empty prompt (the fixed template alone elicits y) is scored as one token, so that ACR stays
  finite and averages stay meaningful; prompt_tokens = 0 still records what was found.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass


def acr(target_tokens: int, prompt_tokens: int | None, cap: int) -> float:
    """ACR of a target; `prompt_tokens=None` means no verified prompt was found (failure)."""
    if target_tokens < 1:
        raise ValueError(f"target_tokens {target_tokens} must be >= 1")
    if cap < 1:
        raise ValueError(f"cap {cap} must be >= 1")
    if prompt_tokens is None:
        return target_tokens / cap
    if prompt_tokens < 0:
        raise ValueError(f"prompt_tokens {prompt_tokens} must be >= 0")
    return target_tokens / max(prompt_tokens, 1)


def is_memorized(acr_value: float, tau: float, success: bool) -> bool:
    """τ-memorized: a verified prompt exists and ACR > τ. Failures are never memorized."""
    return bool(success) and acr_value > tau


def decision_length(target_tokens: int, tau: float) -> int:
    """The longest prompt that still proves ACR > τ: the largest n with target_tokens / n > τ.

    Returns 0 when only the empty prompt could (and -1 never happens for tau > 0 and |y| >= 1)."""
    if tau <= 0:
        raise ValueError(f"tau {tau} must be > 0")
    return max(math.ceil(target_tokens / tau) - 1, 0)


def threshold_flags(acr_value: float, success: bool, taus: Mapping[str, float]) -> dict[str, dict]:
    """{name: {tau, memorized}} for every named threshold."""
    return {
        name: {"tau": float(tau), "memorized": is_memorized(acr_value, tau, success)}
        for name, tau in taus.items()
    }


@dataclass(frozen=True)
class Aggregate:
    count: int
    average_acr: float
    portion_memorized: float
    failures: int


def aggregate(results: Iterable[tuple[float, bool, bool]]) -> Aggregate:
    """Average ACR and portion memorized over all samples, failures included.

    Each item is (acr, memorized, success). A failure keeps its convention ACR (|y| / cap) in the
    average and is counted as not memorized."""
    rows = list(results)
    if not rows:
        return Aggregate(count=0, average_acr=float("nan"), portion_memorized=float("nan"), failures=0)
    n = len(rows)
    return Aggregate(
        count=n,
        average_acr=sum(r[0] for r in rows) / n,
        portion_memorized=sum(1 for r in rows if r[1] and r[2]) / n,
        failures=sum(1 for r in rows if not r[2]),
    )
