"""What a relaunch trusts, checked: a done marker counts only when its results file is whole.

Commits are atomic, so damage comes from outside (a disk error, a copy cut short, a hand edit). A done
marker believed in front of a damaged results file would stay believed: `status` would say all done, a
relaunch would repair nothing and export/report/verify would crash. So on every relaunch each done part
of every store (storage/store.py: a shard of the screen or the results, a unit of phase 2) is checked
against what its done marker recorded at commit time (sha256 and row count) and against its stats; a
part that fails is made pending again, with a warning naming the cause, and is computed again by that
same relaunch. A unit's record of the searches the budget cut (stats "cut",
where each stood) is checked too (storage/records.py): a relaunch goes on from it.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import pyarrow.parquet as pq

from scanner.storage.records import cut_problem

log = logging.getLogger(__name__)

CHUNK = 1 << 20


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def read_json_object(path: Path) -> dict | None:
    """The JSON object in `path`, or None when it is missing, unreadable or not an object."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _results_problem(path: Path, marker: dict, hashed: bool) -> str | None:
    if not path.is_file():
        return f"{path.name} is missing"
    if hashed and marker.get("sha256") and file_sha256(path) != marker["sha256"]:
        return f"{path.name} changed after it was written (sha256 differs from the done marker's)"
    try:
        rows = pq.read_metadata(path).num_rows
    except Exception as err:  # pyarrow raises ArrowInvalid, OSError, ... for a damaged footer
        return f"{path.name} is not a readable Parquet file ({type(err).__name__}: {err})"
    if rows != marker.get("rows"):
        return f"{path.name} holds {rows} rows, its done marker says {marker.get('rows')}"
    return None


def part_problem(store, index: int, hashed: bool = True) -> str | None:
    """Why a store's done part (storage/store.py) cannot be trusted, or None when its marker, rows and
    stats agree;
    `hashed=False` (`status`, every few seconds under --watch) skips the sha256 of the results file and
    still finds one that is missing, cut short (no Parquet footer) or of another row count."""
    marker = read_json_object(store.done_path(index))
    if marker is None or not isinstance(marker.get("rows"), int):
        return "its done marker is unreadable"
    problem = _results_problem(store.result_path(index), marker, hashed)
    if problem:
        return problem
    stats = read_json_object(store.stats_path(index))
    if stats is None:
        return f"its stats file {store.stats_path(index).name} is missing or unreadable"
    if stats.get("rows", marker["rows"]) != marker["rows"]:
        return f"its stats count {stats.get('rows')} rows, the results file {marker['rows']}"
    if "cut" in stats:  # what a relaunch goes on from: a bad record is redone, never believed
        cut = cut_problem(stats["cut"])
        return (
            f"its stats file {store.stats_path(index).name} holds a cut search record that cannot be believed ({cut})"
            if cut
            else None
        )
    return None


def reopen_damaged(store) -> dict[int, str]:
    """Make every done part of `store` that fails `part_problem` pending again; {index: cause}."""
    damaged = {}
    for index in store.done_parts():
        problem = part_problem(store, index)
        if problem:
            log.warning("%s was marked done but %s; it will be computed again", store.label(index), problem)
            store.reopen(index)
            damaged[index] = problem
    return damaged
