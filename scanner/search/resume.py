"""Where a search the budget cut stood, so that a relaunch goes on from there rather than from step 0.

A search is cut between two model requests (search/driver.py run_many). What it had learnt by then is
in its SearchProgress (search/progress.py): the lengths its schedule finished and whether each
succeeded, the shortest verified prompt, the length it was searching, which try and how many GCG steps
that try had spent, and the try's lowest-loss prompt. `Resume` keeps that as plain data (the unit's
stats "cut"); the resumed search replays the schedule's reports (a pure state machine: the same state
exactly), checks the verified prompt again by generation and runs the cut try on from its lowest-loss
prompt with the steps it had left, as a warm start does (search/miniprompt.py `_run_length`).
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass

from scanner.search.progress import SearchProgress
from scanner.storage.records import resume_problem

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Resume:
    tried: tuple[
        tuple[int, bool], ...
    ] = ()  # (length, succeeded) of every length the schedule finished, in order
    found: str | None = None  # the shortest verified prompt so far (checked again on resume)
    length: int | None = None  # the length being searched at the cut
    trial: int = 0  # which try at that length (0: the first, 1..: restarts)
    steps: int = 0  # GCG steps that try had spent
    prompt_ids: tuple[int, ...] | None = None  # that try's lowest-loss prompt: GCG goes on from it
    prompt: str | None = None  # the same, decoded (for a reader of the stats; never used to resume)

    @property
    def refuted(self) -> list[int]:
        return [n for n, ok in self.tried if not ok]

    def to_json(self) -> dict:
        return {
            "tried": [[n, ok] for n, ok in self.tried],
            "refuted": self.refuted,
            "found": self.found,
            "length": self.length,
            "trial": self.trial,
            "steps": self.steps,
            "prompt_ids": list(self.prompt_ids) if self.prompt_ids is not None else None,
            "prompt": self.prompt,
        }

    @classmethod
    def from_json(cls, data: dict | None) -> Resume | None:
        """The record, checked (storage/records.py); None without one, and None with a warning for one
        that cannot be believed: that search starts again rather than commit what it claims."""
        if not data:
            return None
        why = resume_problem(data)
        if why:
            log.warning("a cut search's record is not believed (%s); the search starts again", why)
            return None
        ids = data.get("prompt_ids")
        return cls(
            tuple((int(n), bool(ok)) for n, ok in data.get("tried", [])),
            data.get("found"),
            data.get("length"),
            int(data.get("trial", 0)),
            int(data.get("steps", 0)),
            tuple(int(i) for i in ids) if ids else None,
            data.get("prompt"),
        )


def where(progress: SearchProgress | None, decode) -> Resume | None:
    """Where a cut search stood, from its progress (None: it had not reached a length yet, nothing to
    go on from); `decode(ids)` spells the try's prompt for the record."""
    if progress is None or progress.length is None:
        return None
    ids = tuple(progress.best_ids) if progress.best_ids else None
    return Resume(
        tuple(progress.tried),
        progress.prompt,
        progress.length,
        progress.trial,
        progress.step,
        ids,
        decode(list(ids)) if ids else None,
    )


def replay(schedule, tried: tuple[tuple[int, bool], ...]):
    """A copy of the schedule in the state the cut search left it: its reports made again in order; None,
    with a warning, when the record does not fit it (edited by hand, or of other search options, which the
    run's identity check refuses first): that search starts again rather than go on from a wrong state."""
    schedule = copy.deepcopy(schedule)
    for length, ok in tried:
        attempt = schedule.next()
        if attempt is None or attempt.length != length:
            log.warning(
                "a cut search's record tried length %d where this schedule tries %s: not believed; the "
                "search starts again",
                length,
                attempt.length if attempt else "nothing",
            )
            return None
        schedule.report(ok)
    return schedule
