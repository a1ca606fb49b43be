"""A model's identity by its files: the sha256 of every weight, tokenizer and config file, the hub id
and the revision where known. Evidence names the exact model files that produced it, so a re-check with
another file (a re-quantized copy, a later revision, a fine-tune under the same name) is named, not
silently accepted (scanner/results/bundle.py writes it, scanner/results/verify.py compares it)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from scanner.config import ModelConfig
from scanner.confine import inside
from scanner.engine.loading import model_source
from scanner.errors import InputError

CHUNK = 1 << 20
WEIGHTS = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack")
TOKENIZER = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
             "vocab.json", "vocab.txt", "merges.txt", "tokenizer.model", "tekken.json", "chat_template.jinja",
             "chat_template.json")
CONFIG = ("config.json", "generation_config.json")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            digest.update(block)
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


def model_root(config: ModelConfig) -> tuple[Path, str | None, str | None]:
    """(the file or folder holding the model, its hub id, its revision): a hub id is looked up in the
    local Hugging Face cache only (evidence hashes what was used, never a fresh download)."""
    source = model_source(config.model)
    if source != "hub":
        return Path(config.model), None, config.revision
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        where = Path(snapshot_download(config.model, revision=config.revision, local_files_only=True))
    except (LocalEntryNotFoundError, OSError, ValueError) as err:
        raise InputError(f"--model {config.model}: the hub model is not in the local cache, so its files "
                         f"cannot be hashed ({err}); pass --model DIR, the folder its files are in") from err
    return where, config.model, where.name  # a snapshot folder is named by its commit


def model_files(root: Path) -> list[dict]:
    """[{"path", "role", "bytes", "sha256"}] of every file of the model a loader reads, by path."""
    if root.is_file():
        return [{"path": root.name, "role": "weight", "bytes": root.stat().st_size, "sha256": sha256_file(root)}]
    files = []
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not _hidden(p, root)):
        role = file_role(path.name)
        if role is not None:
            files.append({"path": path.relative_to(root).as_posix(), "role": role,
                          "bytes": path.stat().st_size, "sha256": sha256_file(path)})
    return files


def _hidden(path: Path, root: Path) -> bool:
    return any(part.startswith(".") for part in path.relative_to(root).parts)


def model_identity(config: ModelConfig) -> dict:
    """What identifies the model: the name the run used, its source, hub id, revision and files."""
    root, hub_id, revision = model_root(config)
    files = model_files(root)
    if not any(f["role"] == "weight" for f in files):
        raise InputError(f"--model {config.model}: no weight file found in {root}; pass the model's folder")
    return {"model": config.model, "source": model_source(config.model), "hub_id": hub_id,
            "revision": revision, "files": files}


def identity_problems(recorded: dict, model: str) -> list[str]:
    """How the files of `model` (a folder or a .gguf file) differ from a recorded identity, one line per
    file: a different file (sha256), a missing one. Files the record does not list are not compared."""
    root, _, _ = model_root(ModelConfig(model=model))
    single = root.is_file()
    problems = []
    for entry in recorded.get("files", []):
        # The record's names stay inside the model folder (`..`, absolute paths refused): a bundle must not
        # make verify hash, and print the digest of, any file of this machine.
        path = root if single else inside(root, entry["path"], "the evidence's model.json", follow_links=True)
        if not path.is_file():
            problems.append(f"model file {entry['path']} ({entry['role']}): missing in {model}")
            continue
        digest = sha256_file(path)
        if digest != entry["sha256"]:
            problems.append(f"model file {entry['path']} ({entry['role']}): a different file (sha256 "
                            f"{digest[:16]}..., the evidence's is {entry['sha256'][:16]}...)")
    return problems
