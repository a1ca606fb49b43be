"""The MiniPrompt length search as pure state machines (no model, no torch).

A driver asks `next()` for an `Attempt`, runs GCG at that length and calls `report(success)`; the
schedule keeps the bounds: `hi` the shortest length known to succeed (or the cap), `lo` the longest
known to fail. |x*| is `hi` when `found` is true.
"""

from __future__ import annotations

from dataclasses import dataclass

from scanner.config import SearchConfig
from scanner.errors import InputError
from scanner.measures.acr import decision_length

WARM_KINDS = ("none", "random", "shrink", "grow", "previous")


@dataclass(frozen=True)
class Attempt:
    length: int
    steps: int
    # none: n = 0, nothing to optimize; random; shrink: from the success above; grow: from below;
    # previous: from a prompt another model's search found (a warm start, FastSchedule warm_length)
    warm: str
    tries: int  # runs (the first warm, the rest fresh) before the length is declared failed
    # Early rejection may stop it (search/reject.py): only while nothing is found, so a memorized
    # target's descent is never cut, and never under bound_unmemorized, which asks for that budget.
    may_reject: bool = False


class PaperSchedule:
    """The authors' search: start at 5; success -> cap = n, n - 1; failure -> floor = n, n + 5 and the
    step budget x1.2 (int-truncated, compounding); stop when the next n is >= cap or <= floor."""

    def __init__(self, cap: int, config: SearchConfig):
        self.hi = cap
        self.lo = 0
        self.found = False
        self._n = config.paper_start
        self._steps = config.paper_steps
        self._growth = config.paper_step_growth
        self._increment = config.paper_increment
        self._done = False

    def next(self) -> Attempt | None:
        if self._done:
            return None
        return Attempt(length=self._n, steps=self._steps, warm="random", tries=1, may_reject=not self.found)

    def report(self, success: bool) -> None:
        if success:
            self.hi, self.found = self._n, True
            following = self._n - 1
        else:
            self.lo = self._n
            following = self._n + self._increment
            self._steps = int(self._steps * self._growth)
        if following >= self.hi or following <= self.lo:
            self._done = True
        else:
            self._n = following


class FastSchedule:
    """Verdict first, then minimize.

    1. n = 0 when the fixed template is non-empty (one forward, no optimization);
    2. a short probe (`probe_length`, 5 like the paper's start) when it is below n_d: a success
       proves ACR > tau at once. Memorized text is found far more easily there: a prompt of |y| - 1
       random tokens pulls the model off every context it saw in training, and GCG at that length
       missed canaries seen 64 times that 5 tokens elicited (bench/validity/validity.py, bench/validity/RESULTS.md);
    3. the decision length n_d = ceil(|y| / tau) - 1: success proves ACR > tau, failure (after
       restarts) settles "not memorized" and ends the search;
    4. after a success at n, try n - 1 warm-started from the success (the driver first checks every
       one-token deletion in one batch) until a length fails;
    5. with `bound_unmemorized`, a failure at the decision length grows the prompt instead (by at least
       `paper_increment` or half, warm-started by inserting tokens into the best failed prompt) until
       a length succeeds or the cap is reached, then shrinks back as in 3.
    A certificate (`known_length`, e.g. a natural prefix) starts `hi` below the cap.
    A warm start (`warm_length`: the length of a prompt found for this target on another model, which
    did not verify here) takes the probe's place: one try at that length from that prompt (its one-token
    edits, GCG's moves), then the decision length as without it.
    """

    def __init__(
        self,
        target_tokens: int,
        cap: int,
        config: SearchConfig,
        *,
        has_template: bool,
        known_length: int | None = None,
        warm_length: int | None = None,
    ):
        self.hi = cap
        self.found = known_length is not None
        if known_length is not None:
            self.hi = min(self.hi, known_length)
        # Without a fixed template an empty input cannot be typed: length 0 counts as failed.
        self.lo = -1 if has_template else 0
        self._decide = min(decision_length(target_tokens, config.tau), self.hi - 1)
        self._config = config
        # No probe under a certificate: the descent from it already works at short lengths.
        probe = config.probe_length if known_length is None else 0
        self._warm = warm_length is not None and known_length is None and 0 < warm_length < self._decide
        probe = warm_length if self._warm else probe
        self._probe = probe if 0 < probe < self._decide else None
        first = 0 if (config.try_empty and has_template and self.hi > 0) else (self._probe or self._decide)
        if first <= self.lo and config.bound_unmemorized and self.lo + 1 < self.hi:
            first = self.lo + 1  # nothing short enough to prove memorization: go straight to bounding
        self._n: int | None = first if first > self.lo else None

    def next(self) -> Attempt | None:
        n = self._n
        if n is None:
            return None
        if n == 0:
            return Attempt(length=0, steps=0, warm="none", tries=1)
        shrinking = self.found and n < self.hi
        # grow: from a failed prompt below (not the probe's: the decision length starts fresh, as without one)
        grow = n > self.lo >= 1 and self.lo != self._probe
        warm = "shrink" if shrinking else ("grow" if grow else "random")
        if n == self._probe and self._warm and not self.found:
            warm = "previous"
        steps = self._config.shrink_steps if shrinking and n < self._decide else self._config.decide_steps
        probing = n == self._probe and not self.found  # one try: the decision length has the restarts
        return Attempt(
            length=n,
            steps=steps,
            warm=warm,
            tries=1 if probing else 1 + self._config.restarts,
            may_reject=not (self.found or self._config.bound_unmemorized),
        )

    def report(self, success: bool) -> None:
        n = self._n
        assert n is not None, "report() after the search ended"
        if success:
            self.hi, self.found = n, True
            self._n = n - 1 if n - 1 > self.lo else None
            return
        self.lo = max(self.lo, n)
        if n == 0 and self._probe:
            self._n = self._probe
        elif (n == 0 or (n == self._probe and not self.found)) and 0 < self._decide < self.hi:
            self._n = self._decide
        elif self._config.bound_unmemorized and not self.found and n + 1 < self.hi:
            self._n = min(self.hi - 1, n + max(self._config.paper_increment, -(-n // 2)))
        else:
            self._n = None  # a failure at the decision length, or below a success, ends the search


def make_schedule(
    target_tokens: int,
    cap: int,
    config: SearchConfig,
    *,
    has_template: bool,
    known_length: int | None = None,
    decided_length: int | None = None,
    warm_length: int | None = None,
) -> PaperSchedule | FastSchedule:
    """`cap`: no prompt of `cap` tokens or more is tried; it is |x*| when nothing succeeds.
    `decided_length`: a verdict-only search of this schedule first succeeded there; the schedule is
    returned in the state that search left, to go on below the success. `warm_length`: FastSchedule's
    warm start (the paper's search starts where the authors start, with or without one)."""
    if config.schedule == "paper":
        schedule = PaperSchedule(cap, config)
    else:
        schedule = FastSchedule(
            target_tokens,
            cap,
            config,
            has_template=has_template,
            known_length=known_length,
            warm_length=warm_length,
        )
    return schedule if decided_length is None else _replayed(schedule, decided_length)


def _replayed(schedule, decided: int):
    """Every attempt before the first success failed: replaying that gives the exact state (the paper's
    compounded step budget, the failed probe's floor) the verdict's search ended in."""
    while (attempt := schedule.next()) is not None:
        if attempt.length == decided:
            schedule.report(True)
            return schedule
        schedule.report(False)
    raise InputError(
        f"the schedule never tries length {decided} before it ends: not a length its verdict-only "
        "search could have decided at (the same --schedule and search options are needed)"
    )
