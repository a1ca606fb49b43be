"""What a relaunch trusts, checked: a done marker counts only when its results file is whole.

Commits are atomic, so damage comes from outside (a disk error, a copy cut short, a hand edit). A done
marker believed in front of a damaged results file would stay believed: `status` would say all done, a
relaunch would repair nothing and export/report/verify would crash. So on every relaunch each finished shard's
results file is checked against what its done marker recorded at commit time (sha256 and row count)
and against its stats; a shard that fails is made pending again, with a warning naming the cause, and
is computed again by that same relaunch. A unit's record of the searches the budget cut (stats "cut",
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


def shard_problem(run, shard: int, hashed: bool = True) -> str | None:
    """Why a finished shard cannot be trusted, or None when its marker, results and stats agree;
    `hashed=False` (`status`, every few seconds under --watch) skips the sha256 of the results file and
    still finds one that is missing, cut short (no Parquet footer) or of another row count."""
    marker = read_json_object(run.done_path(shard))
    if marker is None or not isinstance(marker.get("rows"), int):
        return "its done marker is unreadable"
    problem = _results_problem(run.result_path(shard), marker, hashed)
    if problem:
        return problem
    stats = read_json_object(run.stats_path(shard))
    if stats is None:
        return f"its stats file {run.stats_path(shard).name} is missing or unreadable"
    if stats.get("rows", marker["rows"]) != marker["rows"]:
        return f"its stats count {stats.get('rows')} rows, the results file {marker['rows']}"
    if "cut" in stats:  # what a relaunch goes on from: a bad record is redone, never believed
        cut = cut_problem(stats["cut"])
        return f"its stats file {run.stats_path(shard).name} holds a cut search record that cannot be believed ({cut})" \
            if cut else None
    return None


def reopen_damaged(run) -> dict[int, str]:
    """Make every finished shard that fails `shard_problem` pending again; {shard: cause}."""
    damaged = {}
    for shard in run.done_shards():
        problem = shard_problem(run, shard)
        if problem:
            log.warning("shard %05d was marked done but %s; it will be computed again", shard, problem)
            run.reopen(shard)
            damaged[shard] = problem
    return damaged
