"""A model's identity by its files: the sha256 of every weight, tokenizer and config file, the hub id
and the revision where known. Evidence names the exact model files that produced it, so a re-check with
another file (a re-quantized copy, a later revision, a fine-tune under the same name) is named, not
silently accepted. A scan records it when it starts (scanner/run/model_record.py) and every worker
checks the files it loaded against that record; scanner/results/bundle.py copies the record into a
bundle, scanner/results/verify.py and recheck.py compare a model's files with it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from scanner.config import ModelConfig
from scanner.confine import inside
from scanner.engine.loading import model_source
from scanner.errors import InputError

CHUNK = (
    1 << 22
)  # 4 MiB reads: hashing runs at the disk's or sha256's speed, not Python's (bench/evidence/hash_weights.py)
WEIGHTS = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack")
TOKENIZER = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "tokenizer.model",
    "tekken.json",
    "chat_template.jinja",
    "chat_template.json",
)
CONFIG = ("config.json", "generation_config.json")


def sha256_file(path: Path) -> str:
    """Streamed: one reused buffer, so a 16 GB weight file never sits in memory."""
    digest = hashlib.sha256()
    buffer = bytearray(CHUNK)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as f:
        while read := f.readinto(buffer):
            digest.update(view[:read])
    return digest.hexdigest()


def file_role(name: str) -> str | None:
    """weight, tokenizer, config or code (remote code); None for a file the loaders never read."""
    if name in CONFIG:
        return "config"
    if name in TOKENIZER or name.endswith(".model"):  # sentencepiece files: tokenizer.model, spiece.model
        return "tokenizer"
    if name.endswith(".index.json") or name.endswith(WEIGHTS):
        return "weight"
    return "code" if name.endswith(".py") else None


def model_root(config: ModelConfig, fetch: bool = False) -> tuple[Path, str | None, str | None]:
    """(the file or folder holding the model, its hub id, its revision): a hub id is looked up in the
    local Hugging Face cache (evidence hashes what was used); `fetch`: download it there first when it
    is not (a scan's start, which would download it to load it anyway)."""
    source = model_source(config.model)
    if source != "hub":
        return Path(config.model), None, config.revision
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        where = Path(snapshot_download(config.model, revision=config.revision, local_files_only=True))
    except (LocalEntryNotFoundError, OSError, ValueError) as err:
        if not fetch:
            raise InputError(
                f"--model {config.model}: the hub model is not in the local cache, so its files "
                f"cannot be hashed ({err}); pass --model DIR, the folder its files are in"
            ) from err
        where = _fetch(config)
    return where, config.model, where.name  # a snapshot folder is named by its commit


AROUND = ["*.json", "*.model", "*.txt", "*.jinja", "*.py"]  # config, tokenizer and code files of a snapshot


def _fetch(config: ModelConfig) -> Path:
    """Download the snapshot's PyTorch weights (safetensors, else .bin) with its other files, as a loader would."""
    from huggingface_hub import snapshot_download

    for weights in (["*.safetensors"], ["*.bin", "*.pt", "*.pth"]):
        try:
            where = Path(
                snapshot_download(config.model, revision=config.revision, allow_patterns=weights + AROUND)
            )
        except (OSError, ValueError) as err:
            raise InputError(
                f"--model {config.model}: cannot download it from the hub to hash its files "
                f"({err}); pass --model DIR, the folder its files are in"
            ) from err
        if any(file_role(p.name) == "weight" for p in where.rglob("*") if not p.name.endswith(".json")):
            return where
    return where


def listed_files(root: Path) -> list[tuple[str, str]]:
    """(path, role) of every file of the model a loader reads, by path, without reading them."""
    if root.is_file():
        return [(root.name, "weight")]
    found = []
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not _hidden(p, root)):
        role = file_role(path.name)
        if role is not None:
            found.append((path.relative_to(root).as_posix(), role))
    return found


def model_files(root: Path) -> list[dict]:
    """[{"path", "role", "bytes", "sha256"}] of every file of the model a loader reads, by path."""
    files = []
    for path, role in listed_files(root):
        file = root if root.is_file() else root / path
        files.append({"path": path, "role": role, "bytes": file.stat().st_size, "sha256": sha256_file(file)})
    return files


def _hidden(path: Path, root: Path) -> bool:
    return any(part.startswith(".") for part in path.relative_to(root).parts)


def model_identity(config: ModelConfig, fetch: bool = False) -> dict:
    """What identifies the model: the name the run used, its source, hub id, revision and files."""
    root, hub_id, revision = model_root(config, fetch)
    files = model_files(root)
    if not any(f["role"] == "weight" for f in files):
        raise InputError(f"--model {config.model}: no weight file found in {root}; pass the model's folder")
    return {
        "model": config.model,
        "source": model_source(config.model),
        "hub_id": hub_id,
        "revision": revision,
        "files": files,
    }


def identity_problems(recorded: dict, model: str) -> list[str]:
    """How the files of `model` (a folder or a .gguf file) differ from a recorded identity, one line per
    file: a different file (sha256), a missing one. Files the record does not list are not compared."""
    root, _, _ = model_root(ModelConfig(model=model))
    single = root.is_file()
    problems = []
    for entry in recorded.get("files", []):
        # The record's names stay inside the model folder (`..`, absolute paths refused): a bundle must not
        # make verify hash, and print the digest of, any file of this machine.
        path = root if single else inside(root, entry["path"], "the evidence's model.json", model_folder=True)
        if not path.is_file():
            problems.append(f"model file {entry['path']} ({entry['role']}): missing in {model}")
            continue
        digest = sha256_file(path)
        if digest != entry["sha256"]:
            problems.append(
                f"model file {entry['path']} ({entry['role']}): a different file (sha256 "
                f"{digest[:16]}..., the evidence's is {entry['sha256'][:16]}...)"
            )
    return problems


def files_digest(files: list[dict]) -> str:
    """One sha256 for the whole model: of its files' list (path, role, bytes, sha256) as canonical JSON."""
    listed = [{k: f[k] for k in ("path", "role", "bytes", "sha256")} for f in files]
    return hashlib.sha256(json.dumps(listed, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def stamps(root: Path, paths: list[str]) -> dict[str, list[int]]:
    """{path: [bytes, mtime_ns, inode]} of the model's files, on this machine (never recorded in evidence)."""
    out = {}
    for path in paths:
        stat = (root if root.is_file() else root / path).stat()
        out[path] = [stat.st_size, stat.st_mtime_ns, stat.st_ino]
    return out


def record_problems(recorded: list[dict], found: list[dict], missing_ok: bool = False) -> list[str]:
    """How `found` (model_files of a model now) differs from `recorded`, one line per file: another
    sha256, a file the record lacks, a recorded file that is gone (unless `missing_ok`)."""
    before, now = {f["path"]: f for f in recorded}, {f["path"]: f for f in found}
    problems = []
    for path in sorted(set(before) | set(now)):
        old, new = before.get(path), now.get(path)
        if old is None:
            problems.append(f"model file {path} ({new['role']}): not in the record (added since)")
        elif new is None:
            if not missing_ok:
                problems.append(f"model file {path} ({old['role']}): recorded but missing")
        elif new["sha256"] != old["sha256"]:
            problems.append(
                f"model file {path} ({old['role']}): other bytes (sha256 {new['sha256'][:16]}..., "
                f"recorded {old['sha256'][:16]}...)"
            )
    return problems
