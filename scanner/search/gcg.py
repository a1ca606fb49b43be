"""GCG at a fixed prompt length (Zou et al. 2023), as MiniPrompt's inner loop.

Each step: the gradient of the target loss over the one-hot prompt, per-position top-k of its
negative, B distinct single/multi-swap candidates that re-tokenize to themselves, one batched
forward, and a move to the lowest-loss candidate. Every candidate's teacher-forced exact match is read
from the logits already computed; matches are confirmed by real greedy generation before success.

With a draft model attached (config.DraftConfig, probe sampling), the candidates' forward is split: the
draft scores all of them (`DraftScore`), the target a random probe and the draft's best (`probe_scores`),
and the step moves to the best the target scored; matches are still read and verified from the target.

The loop is a generator: it yields its model work (`Gradient`, `Score`) and receives the answers, so a
driver (search/driver.py) can run one search alone or put the work of several targets in one forward.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

import torch

from scanner.config import DraftConfig, GCGConfig
from scanner.engine.batched import Scores, TargetScorer
from scanner.engine.hf import HFEngine, Verification
from scanner.measures import probe as probe_math

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Gradient:
    """Ask for d loss / d one-hot prompt; answered with scorer.gradient's (grad, loss, exact)."""

    scorer: TargetScorer
    prompt: torch.Tensor  # [n] on the CPU

    @property
    def rows(self) -> int:
        return 1

    def run(self) -> tuple[torch.Tensor, float, bool]:
        return self.scorer.gradient(self.prompt.to(self.scorer.target.device))


@dataclass(frozen=True)
class Score:
    """Ask for the loss and teacher-forced match of candidate prompts; answered with Scores."""

    scorer: TargetScorer
    candidates: torch.Tensor  # [B, n] on the CPU

    @property
    def rows(self) -> int:
        return self.candidates.shape[0]

    def run(self) -> Scores:
        return self.scorer.score(self.candidates)


@dataclass(frozen=True)
class DraftScore(Score):
    """Score candidates on the draft model (scorer bound to engine.draft; probe_scores below): its rows are
    the draft's forwards, never counted as the target's (the driver dispatches on the exact type)."""


Request = Gradient | Score | DraftScore

DECIDING, SHRINKING = "deciding", "shrinking"  # MiniPrompt's stages: finding a verdict, then tightening it


@dataclass(frozen=True)
class Stage:
    """Not model work: the search enters stage `name`. The driver answers None at once and charges
    what follows to it, so forwards and seconds split by stage exactly (a search starts in DECIDING)."""

    name: str


Search = Generator[Request | Stage, Any, Any]  # yields requests, receives their answers, returns its result


@dataclass
class GCGOutcome:
    success: Verification | None
    best_ids: list[int]  # lowest loss seen (the warm start for what follows)
    best_loss: float
    steps: int = 0
    losses: list[float] = field(default_factory=list)  # best loss after each step
    # Target tokens that teacher-forced greedy gets right after each step: the step's lowest-loss
    # candidate (`rights`) and its best candidate by that count (`top_rights`).
    rights: list[int] = field(default_factory=list)
    top_rights: list[int] = field(default_factory=list)
    rejected: int = 0  # teacher-forced matches that real generation did not confirm
    stopped: str | None = None  # why the caller's stop rule ended it early (search/reject.py)
    sampled: int = 0  # candidates drawn over all steps
    scored: int = 0  # of them, scored by the target (all of them without a draft)
    agreement: list[float] = field(default_factory=list)  # Spearman rho of draft and target per drafted step


def sample_candidates(
    prompt: torch.Tensor, grad: torch.Tensor, config: GCGConfig, generator: torch.Generator
) -> torch.Tensor:
    """[B', n] distinct candidates, each `prompt` with `n_replace` positions swapped for top-k ids.

    prompt [n] on the CPU, grad [n, V] on any device: top-k runs where the gradient is and only the
    [n, k] ids cross to the CPU, whose generator keeps runs reproducible. Disallowed ids carry +inf
    gradient and are never drawn unless fewer than k ids are allowed (then k shrinks)."""
    n = prompt.numel()
    allowed = int(torch.isfinite(grad[0]).sum())
    top = (-grad).topk(min(config.top_k, allowed), dim=1).indices.cpu()  # [n, k]
    b, r = config.num_candidates, min(config.n_replace, n)
    positions = torch.rand(b, n, generator=generator).argsort(dim=1)[:, :r]  # [B, r]
    picks = torch.randint(top.shape[1], (b, r), generator=generator)
    candidates = prompt.repeat(b, 1)
    candidates.scatter_(1, positions, top[positions, picks])
    candidates = torch.unique(candidates, dim=0)  # sorted rows: deterministic for a seed
    return candidates[(candidates != prompt).any(dim=1)]


def keep_typeable(engine: HFEngine, candidates: torch.Tensor) -> torch.Tensor:
    ok = engine.retokenizes(candidates.tolist())
    return candidates[torch.tensor(ok, dtype=torch.bool)] if candidates.numel() else candidates


def confirm(
    engine: HFEngine, candidates: torch.Tensor, scores: Scores, target_ids: list[int], limit: int
) -> tuple[Verification | None, int]:
    """Verify teacher-forced matches by generation, best loss first; the first that holds wins (a
    vLLM verifier checks all of them in one call). Returns it and the matches refuted before it."""
    matches = torch.nonzero(scores.exact).flatten()
    matches = matches[scores.loss[matches].argsort()][:limit]
    return engine.verify_first([engine.decode(candidates[i].tolist()) for i in matches.tolist()], target_ids)


def probe_scores(
    scorer: TargetScorer, candidates: torch.Tensor, draft: DraftConfig, generator: torch.Generator
) -> Generator[Request, Any, tuple[torch.Tensor, Scores, float]]:
    """Probe sampling: the draft scores all B candidates, the target a random probe of them; the
    Spearman rho of the two on the probe sets how many of the draft's best (outside the probe) the
    target scores too (measures/probe.py). Returns the target-scored candidates, their scores and rho."""
    b = candidates.shape[0]
    drafted = yield DraftScore(scorer.draft, candidates)
    probe = torch.randperm(b, generator=generator)[: probe_math.probe_size(b, draft.probe_size)]
    probed = yield Score(scorer, candidates[probe])
    rho = probe_math.spearman(probed.loss.tolist(), drafted.loss[probe].tolist())
    outside = torch.ones(b, dtype=torch.bool)
    outside[probe] = False
    ranked = drafted.loss.argsort(stable=True)
    ranked = ranked[outside[ranked]]
    best = ranked[: probe_math.filtered_size(b, rho, draft.reduction, draft.min_kept)]
    if best.numel() == 0:
        return candidates[probe], probed, rho
    filtered = yield Score(scorer, candidates[best])
    scores = Scores(
        loss=torch.cat([probed.loss, filtered.loss]),
        exact=torch.cat([probed.exact, filtered.exact]),
        right=torch.cat([probed.right, filtered.right]),
    )
    return candidates[torch.cat([probe, best])], scores, rho


def score_step(
    scorer: TargetScorer,
    candidates: torch.Tensor,
    draft: DraftConfig,
    generator: torch.Generator,
    outcome: GCGOutcome,
) -> Generator[Request, Any, tuple[torch.Tensor, Scores]]:
    """The candidates the target scored and their scores: all of them, or with a draft attached to the
    scorer (scorer.draft) a probe and the draft's best (probe_scores); counted in `outcome`."""
    outcome.sampled += candidates.shape[0]
    if scorer.draft is None or not draft.enabled or candidates.shape[0] <= draft.probe_size:
        outcome.scored += candidates.shape[0]
        return candidates, (yield Score(scorer, candidates))
    kept, scores, rho = yield from probe_scores(scorer, candidates, draft, generator)
    outcome.scored += kept.shape[0]
    outcome.agreement.append(rho)
    return kept, scores


def run_gcg(
    scorer: TargetScorer,
    init: list[int],
    steps: int,
    config: GCGConfig,
    generator: torch.Generator,
    verify_limit: int,
    stop: Callable[[GCGOutcome], str | None] | None = None,
    on_step: Callable[[GCGOutcome], None] | None = None,
) -> Generator[Request, Any, GCGOutcome]:
    """Optimize a prompt of len(init) tokens for at most `steps` steps; stop at a verified match, or
    when `stop` (asked after every step) gives a reason why the run will not get there (outcome.stopped).
    `on_step(outcome)` is told after every scored step (a watcher's hook: it must stay cheap)."""
    engine, target_ids = scorer.engine, scorer.target.tolist()
    current = torch.tensor(init, dtype=torch.long)
    outcome = GCGOutcome(success=None, best_ids=list(init), best_loss=float("inf"))
    since_best = 0
    for step in range(steps):
        grad, loss, exact = yield Gradient(scorer, current)
        if step == 0 and exact:
            check = engine.verify(engine.decode(init), target_ids)
            if check.verified_generation:
                outcome.success = check
                return outcome
            outcome.rejected += 1
        if loss < outcome.best_loss:
            outcome.best_ids, outcome.best_loss, since_best = current.tolist(), loss, 0
        candidates = keep_typeable(engine, sample_candidates(current, grad, config, generator))
        outcome.steps = step + 1
        if candidates.shape[0] == 0:
            continue
        candidates, scores = yield from score_step(scorer, candidates, config.draft, generator, outcome)
        outcome.success, rejected = confirm(engine, candidates, scores, target_ids, verify_limit)
        outcome.rejected += rejected
        best = int(scores.loss.argmin())
        current = candidates[best]
        outcome.losses.append(min(float(scores.loss[best]), outcome.best_loss))
        outcome.rights.append(int(scores.right[best]))
        outcome.top_rights.append(int(scores.right.max()))
        if on_step is not None:
            on_step(outcome)
        if outcome.success is not None:
            outcome.best_ids, outcome.best_loss = outcome.success.prompt_ids or current.tolist(), 0.0
            return outcome
        if float(scores.loss[best]) < outcome.best_loss:
            outcome.best_ids, outcome.best_loss, since_best = current.tolist(), float(scores.loss[best]), 0
        since_best += 1
        if config.patience and since_best >= config.patience:
            break
        if stop is not None and (reason := stop(outcome)) is not None:
            outcome.stopped = reason
            break
    return outcome
