"""Paths that a file names, kept inside the folder that file belongs to: the one rule every reader of a
bundle (manifest.json, model.json), of a model folder a bundle's model.json is checked against, of a run
directory and of a report's pages folder follows.

A name is refused when it is not a relative path of plain parts (absolute, a drive, a backslash, a NUL,
an empty part or `..`), and, where the root is not the user's own, when a symbolic link along it leads
out of the root. Without this, `verify --bundle` opened whatever file a manifest named and told its
sha256 (a hash oracle for any local file), and `export --bundle` copied what a link in a run directory
pointed at. A model folder is the user's own (`--model`), and the Hugging Face cache is made of links
into its blobs, so its links are followed; the names a bundle gives inside it are still confined.

It lives at the package root (beside errors.py) so that every floor can import it: engine/ and storage/
share a floor and may not import each other. results/recheck.py keeps its own copy of `escape_reason`
on purpose: it imports nothing of this package (it is copied into every bundle).
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from scanner.errors import InputError


def lexical_reason(name) -> str | None:
    """Why `name` is not a relative path of plain parts, or None."""
    if not isinstance(name, str) or not name:
        return "is not a file name (a non-empty string)"
    if "\x00" in name or "\\" in name:
        return "holds a NUL or a backslash"
    path = PurePosixPath(name)
    if path.is_absolute() or (len(name) > 1 and name[1] == ":"):
        return "is an absolute path"
    if any(part in ("", "..") for part in name.split("/")):
        return "climbs out of its folder ('..') or has an empty part"
    return None


def link_reason(root: Path, name: str) -> str | None:
    """Why root/name, its symbolic links followed, lies outside `root` (itself resolved), or None."""
    base = Path(root).resolve()
    target = (Path(root) / name).resolve()
    if target != base and base not in target.parents:
        return "is a symbolic link (or lies under one) leading outside its folder"
    return None


def escape_reason(root: Path, name, follow_links: bool = False) -> str | None:
    """Why root/name would leave `root`, or None when it stays inside. `follow_links`: the root is the
    user's own (a model folder), so where its links lead is not checked."""
    return lexical_reason(name) or (None if follow_links else link_reason(root, name))


def inside(root: Path, name, what: str, follow_links: bool = False) -> Path:
    """root/name, or InputError naming `what` (e.g. "the bundle's manifest.json") when it would leave root."""
    reason = escape_reason(root, name, follow_links)
    if reason:
        raise InputError(f"{what} names {name!r}, which {reason}; refused: every path it names must lie inside "
                         f"{root} (the file is damaged or was made to read files elsewhere)")
    return Path(root) / name
