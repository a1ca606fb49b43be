"""Probe sampling's rule (Zhao et al., NeurIPS 2024), pure: how well a draft model's ranking of GCG
candidates agrees with the target's on a random probe, and how many of the draft's best the target
then scores. The engine work is search/gcg.py's (probe_scores)."""

from __future__ import annotations

import math


def ranks(values: list[float]) -> list[float]:
    """1-based ranks, ties sharing their mean rank (what Spearman's rho needs for tied losses: the
    margin loss is 0 for every candidate already greedy-correct)."""
    order = sorted(range(len(values)), key=values.__getitem__)
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(a: list[float], b: list[float]) -> float:
    """Spearman's rank correlation in [-1, 1]; 0 (no evidence either way) when either side is constant
    or shorter than two, where the coefficient is undefined."""
    if len(a) != len(b):
        raise ValueError(f"spearman of {len(a)} and {len(b)} values; give two lists of one length")
    if len(a) < 2:
        return 0.0
    ra, rb = ranks(a), ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb, strict=True))
    va, vb = sum((x - ma) ** 2 for x in ra), sum((y - mb) ** 2 for y in rb)
    if va == 0 or vb == 0:
        return 0.0
    return max(-1.0, min(1.0, cov / math.sqrt(va * vb)))


def agreement(rho: float) -> float:
    """alpha = (1 + rho) / 2: 1 when the draft ranks the probe as the target does, 0 when reversed."""
    return (1.0 + rho) / 2.0


def filtered_size(candidates: int, rho: float, reduction: float, min_kept: int = 1) -> int:
    """How many of the draft's best the target scores: (1 - alpha) * B / R, at least `min_kept`, at most B."""
    kept = int((1.0 - agreement(rho)) * candidates / reduction)
    return max(0, min(candidates, max(min_kept, kept)))


def probe_size(candidates: int, asked: int) -> int:
    """The probe: `asked` candidates, or all of them when there are no more (then no draft is needed)."""
    return min(candidates, asked)
