"""Early rejection: stop a GCG attempt that is not going to reach an exact match (pure, no torch).

A not-memorized target burns the whole budget of every attempt (probe, decision length, restarts)
before the search can say "not memorized"; a memorized one is found within a few dozen steps. What
tells them apart early is how much of the target the model already writes: under teacher forcing, a
memorized text is mostly right after a handful of GCG steps (the model recalls the rest once it is
on the passage), and GCG then closes the last few tokens; unseen text stays far below that and stops
improving. The signal is free: every candidate's count of target tokens right comes from the logits
already computed for its loss (engine/losses.py tokens_right).

The thresholds were chosen from recorded search trajectories (bench/search/early_reject.py,
bench/search/early_reject_trajectories.json, bench/search/RESULTS.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from scanner.config import RejectRule

HOPELESS = "hopeless"  # the model does not know the text: the search ends, "not memorized"
STALLED = "stalled"  # this attempt is stuck: it fails its length without restarts; the schedule goes on


def decide(rights: Sequence[int], target_tokens: int, rule: RejectRule) -> str | None:
    """Whether an attempt that ran len(rights) steps without a verified match should stop, and why.

    `rights[i]`: the most target tokens right under teacher forcing among step i's candidates.
    HOPELESS from step `after` on, when the best count so far is below `min_right` of the target;
    STALLED when the best count was last raised `stall` or more steps ago; else None."""
    steps = len(rights)
    if steps == 0 or steps < rule.after:
        return None
    best = max(rights)
    if best < rule.min_right * target_tokens:
        return HOPELESS
    if rule.stall > 0 and best < target_tokens and steps - 1 - list(rights).index(best) >= rule.stall:
        return STALLED
    return None
