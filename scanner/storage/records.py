"""Records read back from a run directory, checked before they are believed: one reader, one shape each.

A relaunch, `status`, a report and an export read JSON records that an earlier process wrote: a cut
search's resume record (a unit's stats "cut"), the audit's draw (audit_plan.json), the units of a phase
(*_plan.json), where an auto budget stopped (search_stop.json), the recall estimate (recall.json), the
tasks given up as hung (given_up.json) and the lock. Commits are atomic, so a bad record comes from
outside (a hand edit, a copy cut short, another release); believed, it crashed a relaunch with a
traceback, or was committed as a verdict no search reached (a "success" with no prompt became
not_memorized with 0 steps). Each record's shape is written here once as a SPEC, `problem()` says what
in a value departs from it, and `read_record()` is the one reader: a record that departs is named in a
warning and treated as absent, so its owner makes it again.

A SPEC is plain data: a type (int and float never take a bool, float takes only finite numbers), a list
of one SPEC (every item), a dict (an object with these keys; `Optional(SPEC)` keys may be absent), a
`Map` (an object of str keys -> SPEC), `Nullable(SPEC)`, `Tuple(SPEC, ..., least=n)` (a list of these, in
order, the first `least` of them required), or a `Rule` (a check with what it says when it fails).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Optional:
    spec: Any


@dataclass(frozen=True)
class Nullable:
    spec: Any


@dataclass(frozen=True)
class Map:
    spec: Any


@dataclass(frozen=True)
class Tuple:
    specs: tuple
    least: int

    def __init__(self, *specs, least: int | None = None) -> None:
        object.__setattr__(self, "specs", specs)
        object.__setattr__(self, "least", len(specs) if least is None else least)


@dataclass(frozen=True)
class Rule:
    says: str  # what a value must be, for the message ("a count >= 0")
    holds: Callable[[Any], bool]


def _number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _typed(value, kind: type) -> str | None:
    if kind is float:
        return None if _number(value) else "a finite number"
    if kind is int:
        return None if isinstance(value, int) and not isinstance(value, bool) else "a whole number"
    return (
        None
        if isinstance(value, kind)
        else {str: "a string", bool: "true or false", dict: "an object", list: "a list"}.get(
            kind, kind.__name__
        )
    )


def _object(value, spec: dict, where: str) -> str | None:
    if not isinstance(value, dict):
        return f"{where or 'the record'} is {_shown(value)}, not an object"
    for key, inner in spec.items():
        if key not in value:
            if not isinstance(inner, Optional):
                return f"{where + '.' if where else ''}{key} is missing"
            continue
        found = problem(value[key], inner.spec if isinstance(inner, Optional) else inner, _at(where, key))
        if found:
            return found
    return None


def problem(value, spec, where: str = "") -> str | None:
    """What in `value` departs from `spec` ("resume.tried[0] is true, not a whole number"), or None."""
    if isinstance(spec, Optional):
        spec = spec.spec
    if isinstance(spec, Nullable):
        return None if value is None else problem(value, spec.spec, where)
    if isinstance(spec, dict):
        return _object(value, spec, where)
    if isinstance(spec, Map):
        if not isinstance(value, dict):
            return f"{where or 'the record'} is {_shown(value)}, not an object"
        return next((p for k, v in value.items() if (p := problem(v, spec.spec, _at(where, k)))), None)
    if isinstance(spec, list):
        if not isinstance(value, list):
            return f"{where or 'the record'} is {_shown(value)}, not a list"
        return next((p for i, v in enumerate(value) if (p := problem(v, spec[0], f"{where}[{i}]"))), None)
    if isinstance(spec, Tuple):
        if not isinstance(value, list) or not spec.least <= len(value) <= len(spec.specs):
            size = spec.least if spec.least == len(spec.specs) else f"{spec.least} to {len(spec.specs)}"
            return f"{where or 'the record'} is {_shown(value)}, not a list of {size} items"
        return next(
            (
                p
                for i, (v, s) in enumerate(zip(value, spec.specs, strict=False))
                if (p := problem(v, s, f"{where}[{i}]"))
            ),
            None,
        )
    if isinstance(spec, Rule):
        return None if spec.holds(value) else f"{where or 'the record'} is {_shown(value)}, not {spec.says}"
    expected = _typed(value, spec)
    return None if expected is None else f"{where or 'the record'} is {_shown(value)}, not {expected}"


def _at(where: str, key) -> str:
    return f"{where}.{key}" if where else str(key)


def _shown(value) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def read_record(path: Path, spec, quiet: bool = False) -> dict | None:
    """The JSON object in `path` when it has `spec`'s shape; None when it is missing, and None with a
    warning naming the file and its fault when it is unreadable or departs from the shape (its owner
    makes it again). `quiet`: no warning (a reader that runs every few seconds, such as `status`)."""
    try:
        value = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        fault = f"it is not readable JSON ({err})"
    else:
        found = problem(value, spec)
        if found is None:
            return value
        fault = found
    if not quiet:
        log.warning("%s is not believed: %s; it is made again", path, fault)
    return None


COUNT = Rule("a whole number >= 0", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0)
POSITIVE = Rule("a whole number > 0", lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0)
AMOUNT = Rule("a finite number >= 0", lambda v: _number(v) and v >= 0)
SPAN_ID = Rule("a non-empty string", lambda v: isinstance(v, str) and bool(v))


def _claims_are_held(record) -> bool:
    """A search cut after a length succeeded found a prompt there (the empty one at length 0): a success
    without it is no record (believed, it committed not_memorized with 0 steps)."""
    return not any(ok for _, ok in record.get("tried", [])) or isinstance(record.get("found"), str)


# A cut search's resume record (search/resume.py Resume.to_json): where it stood, to go on from.
RESUME = Rule('a resume record whose successes hold the prompt they found ("found")', _claims_are_held)
RESUME_FIELDS = {
    "tried": [Tuple(COUNT, bool)],
    "found": Optional(Nullable(str)),
    "length": Optional(Nullable(COUNT)),
    "trial": Optional(COUNT),
    "steps": Optional(COUNT),
    "prompt_ids": Optional(Nullable([COUNT])),
    "prompt": Optional(Nullable(str)),
}
# A unit's stats "cut" (run/tasks.py): {span_id: what its cut search spent, and where it stood}.
CUT = Map({"steps": COUNT, "forwards": COUNT, "search_s": AMOUNT, "resume": Optional(RESUME_FIELDS)})


# The tasks the Ray driver gave up as hung (storage/progress.py record_given_up); pid: None where the
# heartbeat never named one.
GIVEN_UP = {
    "events": [
        {"task": str, "pid": Nullable(POSITIVE), "silent_s": AMOUNT, "hung_after_s": AMOUNT, "time": AMOUNT}
    ]
}


def resume_problem(record) -> str | None:
    """What makes a resume record unbelievable: its shape, or a success it holds no prompt for."""
    return problem(record, RESUME_FIELDS, "resume") or problem(record, RESUME, "resume")


def cut_problem(cut) -> str | None:
    """What makes a unit's stats "cut" unbelievable (every span's record, its resume included)."""
    found = problem(cut, CUT, "cut")
    if found is None:
        found = next(
            (
                p
                for span, c in cut.items()
                if "resume" in c and (p := resume_problem(c["resume"])) and (p := f"cut.{span}.{p}")
            ),
            None,
        )
    return found


ITEM = Tuple(
    COUNT, SPAN_ID, Nullable(str), least=2
)  # [shard, span_id] or [shard, span_id, the decided prompt]
UNITS_PLAN = {
    "units": [[ITEM]],
    "copies": Optional(Map([Tuple(COUNT, SPAN_ID)])),
    "drawn": Optional(dict),
    "waits": Optional([SPAN_ID]),
}
STRATUM = {"name": str, "total": COUNT, "drawn": [SPAN_ID]}
# --audit-sample as given: a count, a share of the search's seconds or a time (config.py parse_audit).
SAMPLE = Rule("a count or an --audit-sample form", lambda v: isinstance(v, str) or COUNT.holds(v))
AUDIT_DRAW = {
    "key": str,
    "sample": SAMPLE,
    "seed": int,
    "first": COUNT,
    "strata": [STRATUM],
    "units": [[ITEM]],
}


def plan_spec(name: str):
    """The shape of a plan file, by its name (storage/rundir.py): the audit's draw or a phase's units."""
    return AUDIT_DRAW if name == "audit_plan.json" else UNITS_PLAN


# search_stop.json (run/spend.py AutoStop.record): where --search-budget auto stopped, read by `status`.
STOP = {
    "budget": str,
    "unit": COUNT,
    "unit_name": str,
    "verdicts": COUNT,
    "window": COUNT,
    "memorized": COUNT,
    "at_least": COUNT,
    "why": str,
    "units_left": COUNT,
    "candidates_left": COUNT,
}
# recall.json (run/audit.py write_recall, measures/recall.py summary): what status, report and bundle show.
SHARE = Nullable(Rule("a share in [0, 1]", lambda v: _number(v) and 0 <= v <= 1))
RECALL_STRATUM = {
    "stratum": str,
    "total": COUNT,
    "drawn": COUNT,
    "hits": COUNT,
    "missed": Nullable(AMOUNT),
    "missed_low": AMOUNT,
    "missed_high": AMOUNT,
}
RECALL = {
    "method": str,
    "confidence": Rule("a level in (0, 1)", lambda v: _number(v) and 0 < v < 1),
    "strata": [RECALL_STRATUM],
    "drawn": COUNT,
    "hits": COUNT,
    "missed": Nullable(AMOUNT),
    "missed_low": AMOUNT,
    "missed_high": AMOUNT,
    "found": COUNT,
    "recall": SHARE,
    "recall_low": SHARE,
    "recall_high": SHARE,
}
# The run directory's lock (storage/lock.py): a holder a live process must be told from.
LOCK = {
    "host": SPAN_ID,
    "pid": POSITIVE,
    "since": Optional(str),
    "started": Optional(COUNT),
    "boot": Optional(str),
    "command": Optional([str]),
    "lease_s": Optional(Rule("a number of seconds > 0", lambda v: _number(v) and v > 0)),
}
