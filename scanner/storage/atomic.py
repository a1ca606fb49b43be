"""Atomic file writes: readers see the old file or the whole new one, never a part.

A temp file beside the target (hidden, unique per writer), fsync, rename over the target, fsync the
folder. Used for every file of a run directory and for exports.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

TMP_SUFFIX = ".tmp"


def _fsync_dir(folder: Path) -> None:
    # The rename is only durable once the directory entry is on disk; not every OS can open a folder.
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _temp_path(path: Path) -> Path:
    # Hidden, in the same folder (os.replace must not cross file systems), unique per writer.
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}{TMP_SUFFIX}")


def atomic_write(path: str | Path, write: Callable[[BinaryIO], None]) -> None:
    """Call `write(file)` on a temp file beside `path`, fsync it, rename it over `path`, fsync the folder.
    Readers see the old file or the whole new one, never a part."""
    path = Path(path)
    tmp = _temp_path(path)
    try:
        with open(tmp, "xb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    _fsync_dir(path.parent)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    atomic_write(path, lambda f: f.write(data))


def atomic_write_json(path: str | Path, obj) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


def remove_file(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
        _fsync_dir(path.parent)
