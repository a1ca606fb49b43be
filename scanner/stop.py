"""A request to stop the scan and relaunch it later: SIGTERM or SIGUSR1 (a batch system's time limit or
preemption: Slurm sends SIGTERM, or SIGUSR1 with --signal; Kubernetes sends a pod's end as SIGTERM), or
the run directory's lock lost to another driver (storage/lock.py).

The request is a flag of this process, checked where the search budget's deadline is: no task starts
after it (executors), no search of a running unit starts (search/driver.py run_many), and the searches
running go on to their verdicts for GRACE_S seconds, so that a relaunch gives the table an uninterrupted
run gives; past the grace (or at a second signal) they are cut as the budget cuts them, resumable. The
driver then raises Stopped, which releases the lock, and the CLI exits EXIT_CODE. A signal handler only
sets the flag (logging from one could re-enter a stream's write); the first check that sees it logs.
Ray actors are other processes: their units in flight are waited for, up to the grace (executors/ray.py).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator

log = logging.getLogger(__name__)

EXIT_CODE = 75  # EX_TEMPFAIL (sysexits.h): stopped on request, relaunch the same command to go on
SIGNALS = ("SIGTERM", "SIGUSR1")
GRACE_ENV = "ACR_STOP_GRACE_S"
GRACE_S = 20.0  # inside Slurm's KillWait and Kubernetes' terminationGracePeriodSeconds (30 s each by default)
GO, DRAIN, CUT = "go", "drain", "cut"  # state(): start work; start none, finish what runs; cut what runs


class Stopped(Exception):
    """The scan stopped on a request (its units committed or left pending); relaunch to go on."""


_lock = threading.RLock()  # re-entered by a signal handler that lands while the main thread holds it
_state = {"why": None, "at": None, "count": 0, "told": False}
_installed: list[int] = []  # the signals on_signals() handles now
_warned: set[str] = set()  # bad ACR_STOP_GRACE_S values already named


def grace_s() -> float:
    """Seconds the running searches may take to reach their verdicts after a request (ACR_STOP_GRACE_S)."""
    value = os.environ.get(GRACE_ENV)
    if value is None:
        return GRACE_S
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:  # NaN too
        if value not in _warned:  # once: run_many asks at every step
            _warned.add(value)
            log.warning(
                "%s=%r is not a number of seconds >= 0; using %g s (unset it, or set e.g. 60)",
                GRACE_ENV,
                value,
                GRACE_S,
            )
        return GRACE_S
    return seconds


def request(why: str) -> None:
    """Ask the scan to stop; a second request cuts the searches running at once. Safe in a signal handler."""
    with _lock:
        _state["count"] += 1
        if _state["why"] is None:
            _state["why"], _state["at"] = why, time.monotonic()


def requested() -> bool:
    """Whether a stop was requested (the first call that sees it says so in the log)."""
    with _lock:
        why, told = _state["why"], _state["told"]
        _state["told"] = _state["told"] or why is not None
    if why is not None and not told:
        log.warning(
            "%s: no more work starts; the searches running go on to their verdicts for up to %g s, "
            "then the scan exits %d (relaunch the same command to go on)",
            why,
            grace_s(),
            EXIT_CODE,
        )
    return why is not None


def state() -> str:
    """GO, DRAIN (requested: start nothing) or CUT (the grace is over, or a second request came)."""
    if not requested():
        return GO
    with _lock:
        at, count = _state["at"], _state["count"]
    return CUT if count > 1 or time.monotonic() - at >= grace_s() else DRAIN


def reason() -> str:
    return _state["why"] or "no stop requested"


def reset() -> None:
    with _lock:
        _state.update(why=None, at=None, count=0, told=False)


def check() -> None:
    """Raise Stopped when a stop was requested: the driver's point of no further phase."""
    if requested():
        raise Stopped(f"{reason()}; the finished work is committed: relaunch the same command to go on")


def _handler(signum, frame) -> None:
    request(f"{signal.Signals(signum).name} received")


@contextlib.contextmanager
def on_signals() -> Iterator[None]:
    """SIGTERM and SIGUSR1 request a stop for the block (the main thread only: elsewhere nothing is
    installed); the handlers before are restored and the request forgotten after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    numbers = [getattr(signal, name) for name in SIGNALS if hasattr(signal, name)]
    before = {n: signal.signal(n, _handler) for n in numbers}
    _installed[:] = numbers
    try:
        yield
    finally:
        _installed.clear()
        for number, old in before.items():
            signal.signal(number, old)
        reset()


def reclaim() -> None:
    """Handle the signals again inside on_signals() after a library took them (ray.init sets a SIGTERM
    handler that exits at once, the units in flight lost)."""
    if threading.current_thread() is threading.main_thread():
        for number in _installed:
            signal.signal(number, _handler)
