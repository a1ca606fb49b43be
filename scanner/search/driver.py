"""Runs searches (generators that yield `Gradient` and `Score` requests, search/gcg.py) to completion.

With width 1 each request runs alone, exactly as a plain loop would. With width K up to K searches
are live at once (continuous batching: a finished search is replaced by the next at once), and each
round the gradients of all live searches share one forward and backward, and their candidate sets
share forwards (engine/batched.py). A small model leaves an H200 idle on one target's 256-512
candidates; several targets fill it. Rows differ from width 1 only by float rounding (batch shapes).

Time and forwards are attributed per search: its own work between requests (verification) fully,
a shared forward by its share of the rows; and within a search to the stage it last announced
(gcg.Stage), so a cost model sees what deciding a verdict costs apart from tightening it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from scanner.engine import batched
from scanner.engine.hf import HFEngine
from scanner.search.gcg import DECIDING, DraftScore, Gradient, Request, Score, Search, Stage
from scanner.stop import CUT, GO

log = logging.getLogger(__name__)


@dataclass
class Finished:
    index: int  # position of the search in the input
    value: object  # what the search returned (None when it raised)
    error: Exception | None
    forwards: int  # sequences through the model on this search's behalf
    seconds: float
    stages: dict[str, dict] = field(default_factory=dict)  # {stage: {"forwards", "seconds"}}, summing to both
    draft_forwards: int = 0  # sequences through the draft model (probe sampling), not in `forwards`
    draft_seconds: float = 0.0  # its share of the draft's forwards, inside `seconds`
    cut: bool = False  # stopped unfinished at the deadline (value and error None): the budget ran out


@dataclass
class _Live:
    index: int
    search: Search
    request: Request | None = None
    forwards: int = 0
    seconds: float = 0.0
    stage: str = DECIDING
    stages: dict[str, dict] = field(default_factory=dict)
    draft_forwards: int = 0
    draft_seconds: float = 0.0

    def charge(self, forwards: int, seconds: float) -> None:
        """Work done on this search's behalf, to its total and its current stage."""
        self.forwards += forwards
        self.seconds += seconds
        spent = self.stages.setdefault(self.stage, {"forwards": 0, "seconds": 0.0})
        spent["forwards"] += forwards
        spent["seconds"] += seconds

    def charge_draft(self, forwards: int, seconds: float) -> None:
        """The draft model's work: its seconds are the search's too, its forwards are not the target's."""
        self.charge(0, seconds)
        self.draft_forwards += forwards
        self.draft_seconds += seconds
        spent = self.stages[self.stage]
        spent["draft_forwards"] = spent.get("draft_forwards", 0) + forwards
        spent["draft_seconds"] = spent.get("draft_seconds", 0.0) + seconds

    def finished(self, value: object, error: Exception | None, cut: bool = False) -> Finished:
        return Finished(
            self.index,
            value,
            error,
            self.forwards,
            self.seconds,
            self.stages,
            self.draft_forwards,
            self.draft_seconds,
            cut,
        )

    def cut(self) -> Finished:
        """Stopped at the deadline: the search is closed where it waits for its next request."""
        self.search.close()
        return self.finished(None, None, cut=True)


def run_one(engine: HFEngine, search: Search) -> Finished:
    """One search alone; its errors propagate."""
    (done,) = run_many(engine, [search], width=1)
    if done.error is not None:
        raise done.error
    return done


def run_many(
    engine: HFEngine, searches: Iterable[Search], width: int, deadline: float | None = None, stop=None
) -> Iterator[Finished]:
    """Every search to its end, at most `width` at a time; yields each as it finishes. An error in
    one search finishes that search only (Finished.error); the others go on. `deadline` (a time.time()
    instant, None: none): past it no search starts, and the live ones are cut (Finished.cut) between two
    requests, so a search overshoots it by at most one request (a GCG step's forward and its checks).
    `stop()` (scanner/stop.py state; None: never asked): once not GO no search starts, and at CUT the
    live ones are cut as at the deadline; a caller that passes it records cut and unstarted searches."""
    if width > 1 and not batched.supported(engine):
        log.warning("the model's logits are not its head on its body's states; one target per forward")
        width = 1
    pending, live, index = iter(searches), [], 0
    while True:
        now = stop() if stop is not None else GO
        if (deadline is not None and time.time() >= deadline) or now == CUT:
            yield from (job.cut() for job in live)
            return
        while len(live) < width and now == GO and (search := next(pending, None)) is not None:
            job = _Live(index, search)
            index += 1
            if (done := _advance(engine, job, None)) is not None:
                yield done
            else:
                live.append(job)
        if not live:
            return
        answers = _answer(engine, live)
        still = []
        for job in live:
            done = _advance(engine, job, answers[id(job)])
            if done is not None:
                yield done
            else:
                still.append(job)
        live = still


def _advance(engine: HFEngine, job: _Live, answer: object) -> Finished | None:
    """Send the answer; the search runs (verifying, sampling) until its next request or its end."""
    if isinstance(answer, Exception):  # its forward failed: the search ends with that error
        return job.finished(None, answer)
    try:
        job.request = _send(engine, job, answer)
        return None
    except StopIteration as stop:
        return job.finished(stop.value, None)
    except Exception as err:  # one bad target fails alone; the caller reports it
        return job.finished(None, err)


def _send(engine: HFEngine, job: _Live, answer: object) -> Request:
    """The search's next request; a Stage it announces on the way is taken, the work before it charged
    to the stage it ends."""
    while True:
        start, forwards = time.perf_counter(), engine.forwards
        try:
            request = job.search.send(answer)
        finally:
            job.charge(engine.forwards - forwards, time.perf_counter() - start)
        if not isinstance(request, Stage):
            return request
        job.stage, answer = request.name, None


def _answer(engine: HFEngine, live: list[_Live]) -> dict[int, object]:
    """Every live search's request answered: gradients together, then scores together."""
    answers: dict[int, object] = {}
    for kind in (Gradient, DraftScore, Score):
        jobs = [
            job for job in live if type(job.request) is kind
        ]  # exact: a DraftScore is a Score of another model
        if not jobs:
            continue
        start = time.perf_counter()
        try:
            values = _run(engine, kind, [job.request for job in jobs])
        except Exception as err:  # e.g. out of memory at one candidate: those searches fail, not the run
            log.exception("a %s forward of %d searches failed", kind.__name__, len(jobs))
            values = [err] * len(jobs)
        seconds = time.perf_counter() - start
        rows = sum(job.request.rows for job in jobs)
        for job, value in zip(jobs, values, strict=True):
            charge = job.charge_draft if kind is DraftScore else job.charge
            charge(job.request.rows, seconds * job.request.rows / max(rows, 1))
            answers[id(job)] = value
    return answers


def _run(engine: HFEngine, kind: type, requests: list[Request]) -> list[object]:
    if len(requests) == 1:  # alone: exactly the unbatched arithmetic
        return [requests[0].run()]
    if kind is Gradient:
        return batched.gradients(engine, [(r.scorer, r.prompt) for r in requests])
    if kind is DraftScore:  # the draft model's forward, batched where its logits allow it
        engine = requests[0].scorer.engine
        if not batched.supported(engine):
            return [r.run() for r in requests]
    return batched.scores(engine, [(r.scorer, r.candidates) for r in requests])
