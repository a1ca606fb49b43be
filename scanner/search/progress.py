"""What a running search lets a watcher see: one `SearchProgress` per search, updated in place by
MiniPrompt (search/miniprompt.py), and a `SearchObserver` told when it changes.

The observer is a live object passed into the search, never part of a config. `stepped` is called after
every GCG step, so an observer keeps it cheap (update a few numbers, throttle any output); the others
come once per candidate or per prompt length."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class SearchProgress:
    """One search as a watcher sees it."""

    index: int  # the search's place among the jobs it was started with (measure_many's index)
    target_tokens: int
    cap: int = 0
    length: int | None = None  # the prompt length being tried
    trial: int = 0  # restarts at this length (0: the first try)
    step: int = 0  # GCG steps done at this length (this try)
    steps: int = 0  # the step budget at this length (0: no optimization, e.g. a deletion or the empty prompt)
    right: int = 0  # target tokens right under teacher forcing, the best candidate of this try so far
    total_steps: int = 0  # GCG steps of the whole search so far
    outcome: str | None = None  # of the last finished length: found, failed, rejected early (why), ...
    prompt_tokens: int | None = None  # the shortest verified prompt so far
    prompt: str | None = None  # that prompt
    # What a search the budget cuts goes on from (search/resume.py): the lengths the schedule finished,
    # (length, succeeded) in order, and this try's lowest-loss prompt (GCG's best_ids; None before a step).
    tried: list[tuple[int, bool]] = field(default_factory=list)
    best_ids: list[int] | None = None
    started: float = field(default_factory=time.monotonic)

    def elapsed(self) -> float:
        return time.monotonic() - self.started


class SearchObserver:
    """Told what running searches do; every hook a no-op here. Several searches may be live at once
    (they share forwards): each call names its search's SearchProgress."""

    def started(self, progress: SearchProgress) -> None:
        """The search begins (its target tokens and cap are known)."""

    def length_started(self, progress: SearchProgress) -> None:
        """A try at `progress.length` begins."""

    def stepped(self, progress: SearchProgress) -> None:
        """After every GCG step: keep it cheap."""

    def length_finished(self, progress: SearchProgress) -> None:
        """A try at `progress.length` ended with `progress.outcome`."""

    def finished(self, progress: SearchProgress) -> None:
        """The search returned its result (`prompt_tokens` is its shortest verified prompt or None)."""

    def failed(self, index: int, error: Exception) -> None:
        """Search `index` ended with an error (measure_many; its other searches go on)."""

    def stage(self, name: str, done: int, total: int) -> None:
        """A unit's work after its searches, `done` of `total` items: "calibration" of its memorized spans
        (run/tasks.py run_unit), minutes on a real model that a watcher would otherwise see as silence."""


QUIET = SearchObserver()  # the default: nobody watches
