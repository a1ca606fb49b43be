"""RUN_DIR/model.json: the run's record of its model's files (sha256 of every weight, tokenizer and
config file), written by the scan's driver when the run starts (scanner/run/model_record.py) and read
by the workers that check what they loaded and by `export --bundle`, which copies it."""

from __future__ import annotations

from pathlib import Path

from scanner.errors import require
from scanner.storage.integrity import read_json_object

RECORD = "model.json"


def _is_entry(entry) -> bool:
    return (
        isinstance(entry, dict)
        and isinstance(entry.get("path"), str)
        and isinstance(entry.get("role"), str)
        and isinstance(entry.get("sha256"), str)
        and isinstance(entry.get("bytes"), int)
    )


def read_record(run_path: Path) -> dict:
    """The record, checked to be a list of files (InputError naming the file and the fix if not)."""
    path = Path(run_path) / RECORD
    saved = read_json_object(path)
    files = saved.get("files") if saved is not None else None
    require(
        isinstance(files, list) and all(_is_entry(f) for f in files),
        f"{path} is missing or is not a record of the model's files (a run started before acr-scanner "
        "recorded them, or a damaged file); relaunch the scan (the same command) to record them, after "
        "deleting the file if it is damaged",
    )
    return saved
