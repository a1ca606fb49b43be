"""The scan's model identity is its bytes: the sha256 of every weight, tokenizer and config file.

The driver hashes the files once per launch, streamed (engine/identity.py), before any worker starts.
The first launch writes the record to RUN_DIR/model.json and seals the digest of its files into the run's
identity (run_config.json's run_hash, storage/rundir.py); a relaunch that finds other bytes than the
record is refused (its new shards would mix two models in one table), unless nothing of the run was
finished, which starts afresh as a changed configuration does. `export --bundle` copies the record into
the bundle after checking it against the sealed digest (a hand-edited model.json is refused); it never
hashes what is on disk at export time unless given --model. `compare` keeps the same record of its model B
in its own folder, and its workers run the same check (run/compare.py).

Every worker checks the files it loaded against the record before its first task:
- the local executor's worker runs in the driver's process, seconds after the driver hashed the same
  files on the same disk: it compares each file's size, mtime and inode with what the driver saw and
  hashes again only a file whose stamp moved (so the model is read once, not twice, per launch);
- a Ray actor hashes every file again. It may run on another machine, whose copy of the model (its own
  disk, its own hub cache) the driver never read; a stamp says nothing across machines, and a copy with
  one halved tensor keeps its size. The cost is one read of the weights per actor start, about a tenth
  of loading them (bench/evidence/RESULTS.md, "Hashing the weights").
A recorded file a worker does not have is not its problem (a loader that needed it would have failed);
a file it has with other bytes, or one the record lacks, stops it before it scans anything.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from scanner.config import ModelConfig
from scanner.engine.identity import (
    files_digest,
    listed_files,
    model_identity,
    model_root,
    record_problems,
    sha256_file,
    stamps,
)
from scanner.errors import InputError, require
from scanner.storage.atomic import atomic_write_json
from scanner.storage.integrity import read_json_object
from scanner.storage.model_record import RECORD, read_record
from scanner.storage.rundir import RunDir
from scanner.storage.store import has_work

log = logging.getLogger(__name__)

SHOWN = 5  # problems named in an error; the rest are counted


@dataclass(frozen=True)
class ModelRecord:
    """The run's record of its model, and what this launch measured of it."""

    identity: (
        dict  # {"model", "source", "hub_id", "revision", "files": [{"path", "role", "bytes", "sha256"}]}
    )
    seconds: float  # the driver's hashing of every file, this launch
    seen: dict = field(default_factory=dict)  # {path: [bytes, mtime_ns, inode]} as the driver hashed them

    @property
    def digest(self) -> str:
        """The one sha256 of the model's files, sealed into the run's identity."""
        return files_digest(self.identity["files"])


# How a refusal names the folder's model, and its fix: a scan's, or a comparison's model B.
MEASURED = {
    "scan": ("this run was scanned with", "scan into a new --out"),
    "compare": ("this comparison measured as model B", "compare into a new --out"),
}


def record_model(folder: Path, config: ModelConfig, finished: bool, command: str = "scan") -> ModelRecord:
    """Hash the model's files (on the driver, once per launch); refuse a relaunch of a `finished` run (or
    comparison: any unit committed) whose files differ from folder/model.json. Writes nothing: the run's
    folder is checked first (write_record, after it)."""
    start = time.perf_counter()
    root = model_root(config, fetch=True)[0]
    seen = stamps(
        root, [path for path, _ in listed_files(root)]
    )  # before reading: a write while hashing shows
    identity = model_identity(config)
    seconds = time.perf_counter() - start
    log.info(
        "hashed %d model files (%.1f GB) in %.1f s",
        len(identity["files"]),
        sum(f["bytes"] for f in identity["files"]) / 1e9,
        seconds,
    )
    path = folder / RECORD
    if finished and path.exists():
        saved = read_record(folder)
        problems = record_problems(saved["files"], identity["files"])
        measured, fix = MEASURED[command]
        require(
            not problems,
            f"--model {config.model}: its files are not the bytes {measured} (recorded in "
            f"{path}): {_listed(problems)}; restore the model's files, or {fix}",
        )
        return ModelRecord(saved, seconds, seen)
    if finished:
        # model.json deleted after work was committed: this launch's files are recorded again; of a scan,
        # the digest run_config.json seals (storage/rundir.py) still decides whether they are the bytes
        # its finished work was made with.
        log.warning("%s holds finished work but no %s; recording this launch's model files", folder, RECORD)
    return ModelRecord(identity, seconds, seen)


def write_record(folder: Path, model: ModelRecord) -> None:
    """folder/model.json, written where it does not hold this record already."""
    path = folder / RECORD
    if read_json_object(path) != model.identity:
        atomic_write_json(path, model.identity)


def has_finished(run: RunDir) -> bool:
    """Any shard or phase part of the run committed: what a relaunch with other model bytes would mix with."""
    return bool(run.done_shards() or has_work(run.path))


def check_loaded(folder: Path, config: ModelConfig, seen: dict | None = None) -> str:
    """Raise InputError when the files a worker loaded are not the bytes recorded in folder/model.json (a
    scan's run directory, a comparison's folder); return the model's digest. `seen`: the driver's stamps,
    given only to a worker in the driver's own process."""
    recorded = read_record(folder)["files"]
    by_path = {f["path"]: f for f in recorded}
    root = model_root(config)[0]
    found = []
    for path, role in listed_files(root):
        file = root if root.is_file() else root / path
        entry = by_path.get(path)
        if (
            entry is not None
            and seen is not None
            and path in seen
            and stamps(root, [path])[path] == seen[path]
        ):
            found.append(entry)  # unchanged since the driver hashed it, on this machine, in this process
        else:
            found.append(
                {"path": path, "role": role, "bytes": file.stat().st_size, "sha256": sha256_file(file)}
            )
    problems = record_problems(recorded, found, missing_ok=True)
    if problems:
        raise InputError(
            f"--model {config.model}: the files this worker loaded are not the bytes the run "
            f"recorded in {folder / RECORD}: {_listed(problems)}; give every worker the same "
            "model files, or scan into a new --out"
        )
    return files_digest(recorded)


def _listed(problems: list[str]) -> str:
    more = f"; and {len(problems) - SHOWN} more" if len(problems) > SHOWN else ""
    return "; ".join(problems[:SHOWN]) + more
