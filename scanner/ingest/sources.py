"""SRC arguments (folders, files, globs) to the list of files to read, each with its format.

A folder is walked recursively (hidden files and folders left out); files of other types found in a
folder or by a glob are 'ignored' and logged (covers, stylesheets, a Parquet file beside the books). A
file named on its own must be of a known type, and a path or glob that names nothing is an error: both
are typos more often than intent.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path

from scanner.errors import InputError, require
from scanner.ingest.common import Skip

# Longest suffix first: '.jsonl.gz' before anything shorter could match.
FORMATS = {
    ".jsonl.gz": "jsonl",
    ".jsonl.zst": "jsonl",
    ".jsonl": "jsonl",
    ".epub": "epub",
    ".txt": "text",
    ".md": "text",
}
KNOWN = ", ".join(FORMATS)


def file_format(path: Path) -> str | None:
    name = path.name.lower()
    return next((fmt for suffix, fmt in FORMATS.items() if name.endswith(suffix)), None)


def _walk(folder: Path) -> list[Path]:
    files = []
    for root, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        files += [Path(root) / n for n in sorted(names) if not n.startswith(".")]
    return files


def _expand(source: str) -> list[Path]:
    if any(ch in source for ch in "*?["):
        matches = sorted(glob.glob(source, recursive=True))
        require(
            bool(matches),
            f"no files match the glob '{source}'; check the pattern (quote it so that "
            "the shell does not expand it)",
        )
        return [f for m in matches for f in (_walk(Path(m)) if os.path.isdir(m) else [Path(m)])]
    path = Path(source)
    require(path.exists(), f"source '{source}' does not exist; pass a folder, a file or a glob of {KNOWN}")
    if path.is_dir():
        return _walk(path)
    if file_format(path) is None:
        raise InputError(
            f"source '{source}' is not a supported type; ingest reads {KNOWN} (pass the folder "
            "or a glob to skip other files with a log entry)"
        )
    return [path]


def resolve_sources(
    sources: tuple[str, ...], exclude: set[Path]
) -> tuple[list[Path], list[tuple[Path, Skip]]]:
    """(files to read in argument order, each once; ignored files with why). `exclude` keeps the
    output and the log from being read back when they sit among the sources."""
    files, ignored, seen = [], [], set(exclude)
    for source in sources:
        for path in _expand(source):
            resolved = path.resolve()
            if resolved in seen:
                continue
            seen.add(resolved)
            if file_format(path) is None:
                ignored.append((resolved, Skip("other type", f"not one of {KNOWN}", status="ignored")))
            else:
                files.append(resolved)
    return files, ignored


def relative_names(files: list[Path]) -> list[str]:
    """Paths relative to the common folder of all files, with '/' on every OS: the documents' ids."""
    root = os.path.commonpath([str(f.parent) for f in files])
    return [Path(os.path.relpath(f, root)).as_posix() for f in files]
