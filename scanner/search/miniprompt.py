"""MiniPrompt: the length schedule (search/schedule.py) driving GCG, with warm starts and restarts;
each target's result record is search/result.py's AcrResult.

`search` is a generator of model requests (search/gcg.py) for one SearchRequest (search/request.py: the
target and what is known before the search); `measure` runs one alone and `measure_many` runs several
with their forwards shared (search/driver.py)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from scanner.config import SearchConfig
from scanner.engine.batched import TargetScorer
from scanner.engine.hf import HFEngine, Verification
from scanner.measures import acr as acr_math
from scanner.measures.compression import thresholds as compression_thresholds
from scanner.search.driver import run_many, run_one
from scanner.search.gcg import (
    SHRINKING,
    GCGOutcome,
    Request,
    Score,
    Stage,
    confirm,
    keep_typeable,
    run_gcg,
)
from scanner.search.progress import QUIET, SearchObserver, SearchProgress
from scanner.search.reject import HOPELESS, decide
from scanner.search.request import SearchRequest
from scanner.search.result import AcrResult, finish
from scanner.search.resume import Resume, replay, where
from scanner.search.schedule import Attempt, make_schedule

log = logging.getLogger(__name__)


@dataclass
class _State:
    best: Verification | None = None  # shortest verified prompt so far
    best_failed: list[int] | None = None  # lowest-loss prompt of the longest failed length
    warm_ids: list[int] | None = None  # a warm start's prompt that did not verify: GCG starts from it
    steps: int = 0
    rejected: int = 0
    stopped: int = 0  # attempts the early-rejection rule stopped
    trace: list[dict] = field(default_factory=list)


def random_prompt(engine: HFEngine, n: int, generator: torch.Generator, tries: int = 20) -> list[int]:
    """n allowed ids whose string re-tokenizes to them; falls back to one token repeated."""
    pool = torch.tensor(engine.allowed_ids)
    for _ in range(tries):
        ids = pool[torch.randint(len(pool), (n,), generator=generator)].tolist()
        if engine.retokenizes([ids])[0]:
            return ids
    for token in engine.allowed_ids:
        if engine.retokenizes([[token] * n])[0]:
            return [token] * n
    return ids


def _shrink(scorer: TargetScorer, source: list[int], n: int, state: _State, verify_limit: int) -> Generator:
    """From a success of length m > n: every one-token deletion in one batch (m == n + 1), else the
    last n tokens. Returns (verified success or None, init ids or None)."""
    engine, target_ids = scorer.engine, scorer.target.tolist()
    if len(source) != n + 1:
        tail = source[-n:]
        return None, tail if engine.retokenizes([tail])[0] else None
    deletions = keep_typeable(
        engine, torch.tensor([source[:i] + source[i + 1 :] for i in range(len(source))])
    )
    if deletions.shape[0] == 0:
        return None, None
    scores = yield Score(scorer, deletions)
    success, rejected = confirm(engine, deletions, scores, target_ids, verify_limit)
    state.rejected += rejected
    return success, deletions[int(scores.loss.argmin())].tolist()


def _grow(engine: HFEngine, source: list[int], n: int, generator: torch.Generator) -> list[int] | None:
    ids = list(source)
    while len(ids) < n:
        at = int(torch.randint(len(ids) + 1, (1,), generator=generator))
        ids.insert(
            at, engine.allowed_ids[int(torch.randint(len(engine.allowed_ids), (1,), generator=generator))]
        )
    return ids if engine.retokenizes([ids])[0] else None


def _empty_prompt(scorer: TargetScorer) -> Generator[Request, Any, GCGOutcome]:
    check = scorer.engine.verify("", scorer.target.tolist())
    loss = float((yield Score(scorer, torch.empty(1, 0, dtype=torch.long))).loss[0])
    return GCGOutcome(success=check if check.verified_generation else None, best_ids=[], best_loss=loss)


def _record(state: _State, attempt: Attempt, trial: int, warm: str, outcome: GCGOutcome) -> GCGOutcome:
    """Counts and the trace of one attempt, with its trajectory: per step the best loss so far and the
    target tokens right under teacher forcing (of the lowest-loss and of the best candidate)."""
    state.steps += outcome.steps
    state.rejected += outcome.rejected
    state.stopped += outcome.stopped is not None
    state.trace.append(
        {
            "length": attempt.length,
            "trial": trial,
            "tries": attempt.tries,
            "warm": warm,
            "max_steps": attempt.steps if warm not in ("none", "deletion") else 0,
            "steps": outcome.steps,
            "best_loss": outcome.best_loss,
            "success": outcome.success is not None,
            "rejected_early": outcome.stopped,
            "losses": [round(x, 5) for x in outcome.losses],
            "rights": outcome.rights,
            "top_rights": outcome.top_rights,
            "sampled": outcome.sampled,
            "scored": outcome.scored,
            "agreement": [round(x, 4) for x in outcome.agreement],
        }
    )
    return outcome


def _stop_rule(
    config: SearchConfig, attempt: Attempt, target_tokens: int
) -> Callable[[GCGOutcome], str | None] | None:
    """The early-rejection test for this attempt's GCG run, or None (off, or not allowed here)."""
    rule = config.reject_rule()
    if rule is None or not attempt.may_reject:
        return None
    return lambda outcome: decide(outcome.top_rights, target_tokens, rule)


@dataclass
class _Watch:
    """A search's SearchProgress and whoever observes it."""

    observer: SearchObserver
    progress: SearchProgress
    done: int = 0  # steps the try had spent before a relaunch resumed it (search/resume.py)

    def length_started(
        self, attempt: Attempt, trial: int, steps: int, done: int = 0, init: list[int] | None = None
    ) -> None:
        p, self.done = self.progress, done
        p.length, p.trial, p.step, p.steps, p.right, p.best_ids = attempt.length, trial, done, steps, 0, init
        self.observer.length_started(p)

    def stepped(self, outcome: GCGOutcome) -> None:
        p = self.progress
        p.step, p.right, p.best_ids = (
            self.done + outcome.steps,
            max(p.right, outcome.top_rights[-1]),
            outcome.best_ids,
        )
        self.observer.stepped(p)

    def reported(self, length: int, success: bool, state: _State) -> None:
        """The schedule was told how `length` went: a cut search's record (search/resume.py)."""
        p = self.progress
        p.tried.append((length, success))
        p.prompt = state.best.prompt if state.best else None

    def length_finished(self, state: _State, outcome: GCGOutcome) -> GCGOutcome:
        p = self.progress
        p.step, p.total_steps = self.done + outcome.steps, state.steps
        if outcome.top_rights:
            p.right = max(p.right, max(outcome.top_rights))
        p.outcome = (
            "found a prompt"
            if outcome.success is not None
            else f"rejected early ({outcome.stopped})"
            if outcome.stopped
            else "failed"
        )
        if outcome.success is not None:
            p.prompt_tokens, p.right = len(outcome.success.prompt_ids or []) or p.length, p.target_tokens
        self.observer.length_finished(p)
        return outcome


def _run_length(
    scorer: TargetScorer,
    attempt: Attempt,
    state: _State,
    config: SearchConfig,
    generator: torch.Generator,
    watch: _Watch,
    cut: Resume | None = None,
) -> Generator[Request, Any, GCGOutcome]:
    """The tries at one length; `cut`: where a try at this length stood when the budget cut it, which
    goes on from its lowest-loss prompt with the steps it had left (warm 'resumed')."""
    if attempt.warm == "none":
        watch.length_started(attempt, 0, 0)
        outcome = _record(state, attempt, 0, "none", (yield from _empty_prompt(scorer)))
        return watch.length_finished(state, outcome)
    outcome, first = None, cut.trial if cut is not None else 0
    for trial in range(first, attempt.tries):
        init, warm, done = None, attempt.warm if trial == 0 else "random", 0
        if cut is not None and trial == first and cut.prompt_ids:
            init, warm, done = list(cut.prompt_ids), "resumed", min(cut.steps, attempt.steps)
        watch.length_started(attempt, trial, attempt.steps, done, init)
        run = replace(attempt, steps=attempt.steps - done)
        if warm == "shrink" and state.best is not None:
            success, init = yield from _shrink(
                scorer, state.best.prompt_ids, attempt.length, state, config.verify_retries
            )
            if success is not None:  # a deletion already works: no optimization at this length
                outcome = GCGOutcome(success=success, best_ids=success.prompt_ids, best_loss=0.0)
                return watch.length_finished(state, _record(state, attempt, 0, "deletion", outcome))
        elif warm == "grow" and state.best_failed:
            init = _grow(scorer.engine, state.best_failed, attempt.length, generator)
        elif warm == "previous" and state.warm_ids and len(state.warm_ids) == attempt.length:
            init = list(state.warm_ids)
        init = init or random_prompt(scorer.engine, attempt.length, generator)
        stop = _stop_rule(config, attempt, scorer.target.numel())
        outcome = yield from run_gcg(
            scorer, init, run.steps, config.gcg, generator, config.verify_retries, stop, watch.stepped
        )
        watch.length_finished(state, _record(state, run, trial, warm, outcome))
        if outcome.success is not None or outcome.stopped:  # a stopped attempt gets no restarts
            break
    return outcome


def _certificate(engine: HFEngine, natural_prefix: str | None, target_ids: list[int]) -> Verification | None:
    """A user-given prompt string (e.g. the text before the target) that, if it elicits the target,
    bounds |x*| from above before any optimization."""
    if not natural_prefix:
        return None
    check = engine.verify(natural_prefix, target_ids)
    if not check.verified_generation or check.prompt_ids is None:
        log.info("natural prefix does not elicit the target (%d tokens matched)", check.matched_tokens)
        return None
    return check


def effective_cap(engine: HFEngine, target_tokens: int, config: SearchConfig) -> int:
    """cap_factor * |y|, lowered to what fits in the model's context (never below 1)."""
    engine.check_fits(target_tokens, 0)
    cap = config.cap_factor * target_tokens
    if engine.max_positions:
        fixed = len(engine.template.prefix_ids) + len(engine.template.suffix_ids) + target_tokens
        cap = min(cap, engine.max_positions - fixed + 1)
    return max(cap, 1)


def measure(
    engine: HFEngine, target: str | SearchRequest, config: SearchConfig, observer: SearchObserver = QUIET
) -> AcrResult:
    """The ACR of one target (a text, or a SearchRequest that says what is known of it): MiniPrompt under
    `config.schedule`, every success verified."""
    request = SearchRequest(target) if isinstance(target, str) else target
    return finish(run_one(engine, search(engine, request, config, observer)))


@dataclass(frozen=True)
class Cut:
    """A search stopped unfinished at the deadline (the search budget ran out): what it had spent."""

    steps: int
    forwards: int
    seconds: float
    resume: Resume | None = None  # where it stood, to go on from (None: it had not reached a length)


class _Steps(SearchObserver):
    """Counts each search's GCG steps and keeps its progress while passing every event on: a cut search's
    record, its spend and where it stood (search/resume.py)."""

    def __init__(self, observer: SearchObserver) -> None:
        self.observer, self.steps, self.progress = observer, {}, {}
        self.length_started = observer.length_started
        self.length_finished, self.finished, self.failed = (
            observer.length_finished,
            observer.finished,
            observer.failed,
        )

    def started(self, progress: SearchProgress) -> None:
        self.progress[progress.index] = progress  # where a search stands, should the deadline cut it
        self.observer.started(progress)

    def stepped(self, progress: SearchProgress) -> None:
        self.steps[progress.index] = self.steps.get(progress.index, 0) + 1
        self.observer.stepped(progress)


def measure_many(
    engine: HFEngine,
    jobs: list[tuple[SearchRequest, SearchConfig]],
    width: int,
    observer: SearchObserver = QUIET,
    deadline: float | None = None,
    stop=None,
) -> Iterator[tuple[int, AcrResult | Exception | Cut]]:
    """`measure` of every (request, config), up to `width` sharing forwards; (index, result or the
    error that ended that target) as each finishes. `observer` sees each search move (its index: the job's).
    `deadline` (time.time() instant): past it the live searches end as a Cut and the others never start;
    `stop`: a stop request's state (search/driver.py run_many), alike."""
    counted = _Steps(observer)
    searches = (
        search(engine, request, config, counted, index) for index, (request, config) in enumerate(jobs)
    )
    for done in run_many(engine, searches, width, deadline, stop):
        if done.cut:
            yield (
                done.index,
                Cut(
                    counted.steps.get(done.index, 0),
                    done.forwards,
                    done.seconds,
                    where(counted.progress.get(done.index), engine.decode),
                ),
            )
            continue
        if done.error is not None:
            observer.failed(done.index, done.error)
        yield done.index, done.error or finish(done)


def search(
    engine: HFEngine,
    request: SearchRequest,
    config: SearchConfig,
    observer: SearchObserver = QUIET,
    index: int = 0,
) -> Generator[Request | Stage, Any, AcrResult]:
    """MiniPrompt of one target as a generator of model requests (wall_s and forwards left 0: the
    driver attributes them), announcing SHRINKING after its first verified success; `observer` is told
    how it moves (search/progress.py), as job `index`."""
    text = request.text
    target_ids = list(request.target_ids) if request.target_ids is not None else engine.encode_target(text)
    cap = effective_cap(engine, len(target_ids), config)
    watch = _Watch(observer, SearchProgress(index, len(target_ids), cap))
    observer.started(watch.progress)
    generator = torch.Generator().manual_seed(config.seed)
    scorer = TargetScorer(engine, target_ids, config.gcg.loss)
    scorer.draft = draft_scorer(engine, target_ids, config)
    if request.decided:  # its verdict is in: everything here, its check included, tightens it
        yield Stage(SHRINKING)
    decided = _certificate(engine, request.decided, target_ids)
    state = _State(best=decided or _certificate(engine, request.certificate, target_ids))
    certificate = len(state.best.prompt_ids) if state.best and not decided else None
    warm = None if decided or state.best else _warm_start(engine, request.warm, target_ids, state)
    schedule = make_schedule(
        len(target_ids),
        cap,
        config,
        has_template=engine.template.has_fixed_tokens,
        known_length=certificate or warm,
        decided_length=len(decided.prompt_ids) if decided else None,
        warm_length=len(state.warm_ids) if state.warm_ids else None,
    )
    watch.progress.prompt_tokens = len(state.best.prompt_ids) if state.best else None
    shrinking, bounded = bool(request.decided), False
    if warm is not None and acr_math.is_memorized(acr_math.acr(len(target_ids), warm, cap), config.tau, True):
        yield Stage(SHRINKING)  # the warm prompt is the verdict: what follows only tightens it
        shrinking = True
        if config.verdict_only:
            bounded = schedule.next() is not None
            schedule = _Ended()
    cut, replayed = request.resume, _resumed(engine, schedule, request.resume, state, watch, target_ids)
    schedule, cut = (
        (replayed, cut) if replayed is not None else (schedule, None)
    )  # None: not believed, from 0
    if cut is not None and any(ok for _, ok in cut.tried) and not shrinking:
        shrinking = True  # the cut search had its verdict: what follows tightens it
        yield Stage(SHRINKING)
    while (attempt := schedule.next()) is not None:
        going_on = cut if cut is not None and cut.length == attempt.length else None
        cut = None  # only the first length after the replay is the one the budget cut
        outcome = yield from _run_length(scorer, attempt, state, config, generator, watch, going_on)
        if outcome.stopped == HOPELESS:  # the model does not know the text: "not memorized" now
            break
        ok = outcome.success is not None
        if ok:
            state.best = outcome.success
        else:
            state.best_failed = outcome.best_ids
        schedule.report(ok)
        watch.reported(attempt.length, ok, state)
        if ok and config.verdict_only:  # the verdict is in; shrinking is another unit's work
            bounded = schedule.next() is not None
            break
        if ok and not shrinking:  # a verdict is found: what follows only tightens it, a cost of its own
            shrinking = True
            yield Stage(SHRINKING)
    watch.progress.prompt_tokens = len(state.best.prompt_ids) if state.best else None
    observer.finished(watch.progress)
    return replace(
        _result(engine, text, target_ids, cap, config, state, certificate),
        bounded=bounded,
        decided_tokens=len(decided.prompt_ids) if decided else None,
    )


def _resumed(
    engine: HFEngine, schedule, cut: Resume | None, state: _State, watch: _Watch, target_ids: list[int]
):
    """The schedule where the budget cut this search (search/resume.py): the lengths it finished replayed,
    its shortest verified prompt checked again by generation; None without a record, or when the record
    does not fit the schedule or its success's prompt no longer elicits the target (never believed)."""
    replayed = replay(schedule, cut.tried) if cut is not None else None
    found = _certificate(engine, cut.found, target_ids) if replayed is not None and cut.found else None
    if replayed is None or (found is None and any(ok for _, ok in cut.tried)):
        if replayed is not None:
            log.warning(
                "a cut search's record claims a success whose prompt does not elicit the target: not "
                "believed; the search starts again"
            )
        return None
    watch.progress.tried.extend(cut.tried)
    if found is not None and (state.best is None or len(found.prompt_ids) < len(state.best.prompt_ids)):
        state.best = found
    watch.progress.prompt = state.best.prompt if state.best else None
    return replayed


class _Ended:
    """A schedule with nothing left to try."""

    def next(self) -> None:
        return None


def _warm_start(engine: HFEngine, prompt: str | None, target_ids: list[int], state: _State) -> int | None:
    """A warm start's prompt checked by generation, recorded as the trace's first attempt (no GCG step):
    its length when it elicits the target (then it is `state.best`), else None with its ids kept for GCG
    to start from (when they re-tokenize to themselves)."""
    if not prompt:
        return None
    check = engine.verify(prompt, target_ids)
    ids = list(check.prompt_ids or [])
    ok = bool(check.verified_generation and ids)
    state.trace.append(
        {
            "length": len(ids),
            "trial": 0,
            "tries": 1,
            "warm": "previous",
            "max_steps": 0,
            "steps": 0,
            "best_loss": None,
            "success": ok,
            "rejected_early": None,
            "losses": [],
            "rights": [],
            "top_rights": [],
            "sampled": [],
            "scored": [],
            "agreement": [],
        }
    )
    if ok:
        state.best = check
        return len(ids)
    state.warm_ids = ids if ids and engine.retokenizes([ids])[0] else None
    return None


def draft_scorer(engine: HFEngine, target_ids: list[int], config: SearchConfig) -> TargetScorer | None:
    """The target on the draft model when the config asks for one; the engine must have loaded that draft
    (engine/draft.py attach_draft): a search never runs silently without the draft it was configured with."""
    wanted = config.gcg.draft.model
    if wanted is None:
        return None
    if engine.draft is None or engine.draft_name != wanted:
        raise ValueError(
            f"the search asks for the draft model {wanted!r} but the engine has "
            f"{engine.draft_name!r} attached; build the engines with draft={wanted!r}"
        )
    return TargetScorer(engine.draft, target_ids, config.gcg.loss)


def _result(
    engine: HFEngine,
    text: str,
    target_ids: list[int],
    cap: int,
    config: SearchConfig,
    state: _State,
    certificate: int | None,
) -> AcrResult:
    """The record of a finished search; wall_s and forwards are the driver's to fill in."""
    best = state.best
    tokens = len(best.prompt_ids) if best else None
    value = acr_math.acr(len(target_ids), tokens, cap)
    taus = {"tau": config.tau, **compression_thresholds(text)}
    verifier = engine.verify_info()
    return AcrResult(
        target=text,
        target_ids=target_ids,
        target_tokens=len(target_ids),
        prompt=best.prompt if best else None,
        prompt_ids=best.prompt_ids if best else None,
        prompt_tokens=tokens,
        acr=value,
        memorized=acr_math.is_memorized(value, config.tau, best is not None),
        thresholds=acr_math.threshold_flags(value, best is not None, taus),
        success=best is not None,
        verified_generation=bool(best and best.verified_generation),
        teacher_forced=bool(best and best.teacher_forced),
        min_margin=best.min_margin if best else None,
        certificate_tokens=certificate,
        cap=cap,
        schedule=config.schedule,
        tau=config.tau,
        steps=state.steps,
        forwards=0,
        rejected_matches=state.rejected,
        verify_engine=verifier["engine"],
        verify_version=verifier["version"],
        verify_dtype=verifier["dtype"],
        verify_flags=verifier["flags"],
        verify_disagrees=best.disagrees if best else None,
        wall_s=0.0,
        seed=config.seed,
        bos=engine.template.bos_policy,
        rejected_early=best is None and state.stopped > 0,
        generation_margin=best.generation_margin if best else None,
        generation_margin_at=best.generation_margin_at if best else None,
        fragile_below=config.fragile_margin if best else None,
        trace=state.trace,
    )
