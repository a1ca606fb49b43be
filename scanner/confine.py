"""Paths that a file names, kept inside the folder that file belongs to: the one rule every reader of a
bundle (manifest.json, model.json), of a model folder a bundle's model.json is checked against, of a run
directory and of a report's pages folder follows.

A name is refused when it is not a relative path of plain parts (absolute, a drive, a backslash, a NUL,
an empty part or `..`), and, where the root is not the user's own, when a symbolic link along it leads
out of the root. Without this, `verify --bundle` opened whatever file a manifest named and told its
sha256 (a hash oracle for any local file), and `export --bundle` copied what a link in a run directory
pointed at. A model folder's links may lead anywhere inside it and, as the Hugging Face cache is made
of links from a snapshot into its blobs, into the blobs of the cache that holds it; not elsewhere: a
link to /etc/shadow in a model folder, named by a bundle's model.json, had its digest printed. A link
loop is refused too (resolving it raised).

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
    base, target = _resolved(root, name)
    if target is None:
        return "is a symbolic link loop (or one too deep to follow)"
    if target != base and base not in target.parents:
        return "is a symbolic link (or lies under one) leading outside its folder"
    return None


def model_link_reason(root: Path, name: str) -> str | None:
    """Why root/name, its links followed, lies outside the model folder `root` and outside the blobs of
    the Hugging Face cache that holds it (a snapshot's files are links into ../../blobs), or None."""
    base, target = _resolved(root, name)
    if target is None:
        return "is a symbolic link loop (or one too deep to follow)"
    blobs = base.parent.parent / "blobs" if base.parent.name == "snapshots" else None
    if target == base or base in target.parents or (blobs is not None and blobs in target.parents):
        return None
    return "is a symbolic link leading outside the model folder (and outside a hub cache's blobs)"


def _resolved(root: Path, name: str) -> tuple[Path, Path | None]:
    """(root resolved, root/name resolved or None for a link loop, which Path.resolve raises on)."""
    base = Path(root).resolve()
    try:
        return base, (Path(root) / name).resolve()
    except (OSError, RuntimeError):  # RuntimeError: Python 3.11's "Symlink loop from ..."
        return base, None


def escape_reason(root: Path, name, model_folder: bool = False) -> str | None:
    """Why root/name would leave `root`, or None when it stays inside. `model_folder`: the root is a model
    folder, whose links may also lead into the hub cache's blobs (model_link_reason)."""
    return lexical_reason(name) or (model_link_reason if model_folder else link_reason)(root, name)


def inside(root: Path, name, what: str, model_folder: bool = False) -> Path:
    """root/name, or InputError naming `what` (e.g. "the bundle's manifest.json") when it would leave root."""
    reason = escape_reason(root, name, model_folder)
    if reason:
        raise InputError(
            f"{what} names {name!r}, which {reason}; refused: every path it names must lie inside "
            f"{root} (the file is damaged or was made to read files elsewhere)"
        )
    return Path(root) / name
