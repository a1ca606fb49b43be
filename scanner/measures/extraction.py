"""Probabilistic discoverable extraction (Hayes et al. 2024; Cooper et al. 2025 on books), read off the
screen's teacher-forced window row: the span given its preceding document context.

Under a decoding scheme z, p_z is the probability that z generates the span exactly from its prefix: the
product over the span's tokens of each token's probability after z's truncation and temperature.
- greedy: 1 when every span token is the argmax, else 0;
- top-k sampling at temperature T: the softmax of logits / T restricted to the k largest logits, 0 for a
  token outside them.
A span is (n, p)-discoverable when 1 - (1 - p_z)^n >= p: at least probability p that one of n samples
reproduces it. p_z of a long span underflows a float, so it is kept as a log and the extraction
probability is formed with log1p/expm1 (`log1mexp`), exact at both ends (p_z near 0 and near 1).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable

from scanner.config import ExtractionConfig
from scanner.errors import require

log = logging.getLogger(__name__)

LOG10_E = math.log10(math.e)


def topk_from_logprobs(
    token_logprob: float, top_logprobs: Iterable[float], inside: bool, temperature: float
) -> float:
    """The same from a server's log-probs at T = 1 (vLLM's prompt log-probs: the token's and the k best
    at one position). log_softmax differs from the logits by a constant per position, which cancels in
    the renormalization over the top k at any temperature."""
    if not inside:
        return -math.inf
    scaled = [lp / temperature for lp in top_logprobs]
    top = max(scaled)
    return token_logprob / temperature - (top + math.log(sum(math.exp(s - top) for s in scaled)))


def log_pz(token_logprobs: Iterable[float]) -> float:
    """Natural log of p_z: the sum over the span's tokens (-inf when one is impossible under z)."""
    return float(math.fsum(token_logprobs))


def greedy_pz(matches: Iterable[bool]) -> float:
    """p_z under greedy decoding: 1 when every span token is the argmax, else 0."""
    return 1.0 if all(matches) else 0.0


def log1mexp(x: float) -> float:
    """log(1 - e^x) for x <= 0, accurate for x near 0 and very negative alike (Maechler 2012)."""
    require(x <= 0, f"log1mexp takes a log-probability <= 0, got {x}")
    if x == 0:
        return -math.inf
    return math.log(-math.expm1(x)) if x > -math.log(2) else math.log1p(-math.exp(x))


def extraction_probability(log_p: float, n: int) -> float:
    """1 - (1 - p_z)^n from log p_z: the chance that at least one of n samples is the span."""
    if log_p == -math.inf:
        return 0.0
    log_miss = log1mexp(min(log_p, 0.0))  # log(1 - p_z)
    return 1.0 if log_miss == -math.inf else -math.expm1(n * log_miss)


def np_discoverable(log_p: float, n: int, p: float) -> bool:
    return extraction_probability(log_p, n) >= p


def columns(log_p_topk: float | None, pz_greedy: float | None, config: ExtractionConfig) -> dict:
    """The results table's extraction columns for one screened span (None: not computed)."""
    known = log_p_topk is not None and not math.isnan(log_p_topk)
    chance = extraction_probability(log_p_topk, config.n) if known else None
    return {
        "pz_greedy": pz_greedy,
        "pz_topk": math.exp(log_p_topk) if known else None,
        "log10_pz_topk": log_p_topk * LOG10_E if known else None,
        "pz_top_k": config.top_k if known else None,
        "pz_temperature": config.temperature if known else None,
        "np_n": config.n if known else None,
        "np_p": config.p if known else None,
        "np_extraction_probability": chance,
        "np_discoverable": None if chance is None else chance >= config.p,
    }
