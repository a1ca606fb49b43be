"""A cheap check of a local --model before anything is written: headers, never weights.

A bad model must fail in seconds and leave no run directory behind (a corrected command would otherwise
be refused as a changed configuration). It parses config.json and tokenizer.json, and reads the header
of every weight file the loader would use: a safetensors file is an 8-byte header length, a JSON header
with each tensor's data offsets, then the data, so a file cut short is found from its size alone; a GGUF
file's magic, key-values and tensor infos say the same. A hub id is checked to be in the local Hugging
Face cache or the hub reachable: offline, the hub client would retry for a minute and a half, print
dozens of warnings and only then fail, after a scan had made its folder.
"""

from __future__ import annotations

import json
import logging
import zipfile
from pathlib import Path

from scanner.config import ModelConfig, PromptConfig
from scanner.engine.loading import brief, model_source
from scanner.errors import InputError

log = logging.getLogger(__name__)

GGUF_MAGIC = b"GGUF"
SAFETENSORS_MAX_HEADER = 100 * 2**20  # the safetensors library refuses larger headers too
REFETCH = (
    "the file is damaged or was cut short while copying; download or copy it again from the model's source"
)
# Files a transformers tokenizer is built from (besides tokenizer.json and any sentencepiece *.model).
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.json",
    "merges.txt",
    "vocab.txt",
    "tokenizer.model",
    "tekken.json",
)
INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


def check_model(config: ModelConfig) -> str:
    """Raise InputError naming the file and the fix for a local model that cannot load; returns its source."""
    source = model_source(config.model)
    if source == "gguf":
        check_gguf(Path(config.model), config.model)
    elif source == "local":
        check_hf_dir(Path(config.model), config)
    else:
        check_hub(config)
    return source


def check_hub(config: ModelConfig) -> None:
    """A hub id's files are in the local cache or the hub answers; else InputError, one wording for every
    command. The hub is probed by a TCP connection (5 s), not through the client's retries."""
    import os
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants, snapshot_download

    try:
        snapshot_download(config.model, revision=config.revision, local_files_only=True)
        return
    except Exception:  # noqa: BLE001  not cached (or partly): the hub must answer
        pass
    url = urlparse(constants.ENDPOINT)
    if constants.HF_HUB_OFFLINE:
        why = "HF_HUB_OFFLINE is set"
    elif any(os.environ.get(k) for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return  # through a proxy: only the client can tell
    else:
        try:
            socket.create_connection(
                (url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout=5
            ).close()
            return
        except OSError as err:
            why = f"the hub ({constants.ENDPOINT}) cannot be reached: {err}"
    raise InputError(
        f"--model {config.model}: not a local folder nor a .gguf file, not in the Hugging Face cache, "
        f"and {why}; pass --model DIR (a folder with the model's files) or a .gguf file"
    )


def _damaged(model: str, file: Path, what: str, fix: str = REFETCH) -> InputError:
    return InputError(f"--model {model}: '{file}' {what}; {fix}")


def check_hf_dir(path: Path, config: ModelConfig) -> None:
    _read_json(config.model, path / "config.json", dict)
    for file in weight_files(path, config.model):
        if file.suffix == ".safetensors":
            check_safetensors(file, config.model)
        else:
            check_torch_zip(file, config.model)
    check_tokenizer(path, config)
    log.debug("model %s: config, weight headers and tokenizer check out", config.model)


def _read_json(model: str, file: Path, kind: type):
    try:
        value = json.loads(file.read_bytes())
    except (ValueError, UnicodeDecodeError) as err:
        raise _damaged(
            model, file, f"is not valid JSON ({err})", "restore it from the model's source"
        ) from err
    if not isinstance(value, kind):
        raise _damaged(
            model,
            file,
            f"holds a JSON {type(value).__name__}, not an object",
            "restore it from the model's source",
        )
    return value


def weight_files(path: Path, model: str) -> list[Path]:
    """The files the loader reads, in its order of preference: safetensors (one file or an index of
    shards), else PyTorch .bin. A shard the index names but the folder lacks is an error here."""
    for index in INDEXES:
        if (path / index).is_file():
            weight_map = _read_json(model, path / index, dict).get("weight_map")
            if not isinstance(weight_map, dict) or not weight_map:
                raise _damaged(
                    model, path / index, "has no 'weight_map'", "restore it from the model's source"
                )
            files = [path / name for name in sorted(set(weight_map.values()))]
            missing = [f.name for f in files if not f.is_file()]
            if missing:
                raise _damaged(
                    model,
                    path / index,
                    f"names {len(missing)} weight file(s) the directory lacks ({', '.join(missing[:3])})",
                    "copy every shard of the model into it",
                )
            return files
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (path / name).is_file():
            return [path / name]
    raise InputError(
        f"--model {model}: no weights in the directory (model.safetensors, "
        "model-*.safetensors with model.safetensors.index.json, or pytorch_model.bin); "
        "copy the model's weight files beside its config.json"
    )


def check_safetensors(file: Path, model: str) -> None:
    size = file.stat().st_size
    with open(file, "rb") as f:
        head = f.read(8)
        length = int.from_bytes(head, "little")
        if len(head) < 8 or length > min(SAFETENSORS_MAX_HEADER, size - 8):
            raise _damaged(
                model,
                file,
                f"is not a safetensors file or is cut short ({size} bytes, header "
                f"length {length if len(head) == 8 else 'missing'})",
            )
        raw = f.read(length)
    try:
        header = json.loads(raw)
        ends = [int(info["data_offsets"][1]) for name, info in header.items() if name != "__metadata__"]
    except (ValueError, UnicodeDecodeError, TypeError, KeyError, IndexError, AttributeError) as err:
        raise _damaged(
            model, file, f"has a corrupt safetensors header ({type(err).__name__}: {brief(err)})"
        ) from err
    expected = 8 + length + max(ends, default=0)
    if size != expected:
        what = "cut short" if size < expected else "longer than its header says"
        raise _damaged(model, file, f"is {size} bytes but its header describes {expected} ({what})")


def check_torch_zip(file: Path, model: str) -> None:
    """torch.save's zip format keeps its directory at the end: a truncated file has none. Files in the
    legacy pickle format have no such directory and are left to the loader."""
    with open(file, "rb") as f:
        is_zip_start = f.read(2) == b"PK"
    if is_zip_start and not zipfile.is_zipfile(file):
        raise _damaged(model, file, "is a PyTorch zip archive without its central directory (cut short)")


def check_tokenizer(path: Path, config: ModelConfig) -> None:
    """tokenizer.json parses with the `tokenizers` library (a fast check: no transformers import). A
    directory without one is left to transformers only where it holds files a tokenizer is built from."""
    present = sorted(p.name for p in path.iterdir() if p.name in TOKENIZER_FILES or p.suffix == ".model")
    fix = "copy the model's tokenizer.json and tokenizer_config.json from its source"
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        if (path / name).is_file():
            _read_json(config.model, path / name, dict)
    if (path / "tokenizer.json").is_file():
        from tokenizers import Tokenizer

        try:
            Tokenizer.from_file(str(path / "tokenizer.json"))
        except Exception as err:  # the Rust library raises its own exception type for any bad file
            raise _damaged(
                config.model, path / "tokenizer.json", f"does not load as a tokenizer ({brief(err)})", fix
            ) from err
    elif not [name for name in present if name != "tokenizer_config.json"]:  # nothing to build one from
        raise InputError(
            f"--model {config.model}: no tokenizer in the directory (tokenizer.json; files "
            f"present: {', '.join(present) or 'none'}); {fix}"
        )


def check_gguf(file: Path, model: str) -> None:
    with open(file, "rb") as f:
        head = f.read(4)
    if head != GGUF_MAGIC:
        raise InputError(
            f"--model {model}: '{file}' is not a GGUF file (it starts with {head!r}, not "
            f"{GGUF_MAGIC!r}); pass a .gguf written by llama.cpp's converter, or an HF model directory"
        )
    from gguf import GGUFReader

    try:
        reader = GGUFReader(file)
        end = max((int(t.data_offset) + int(t.n_bytes) for t in reader.tensors), default=0)
    except Exception as err:  # the reader raises ValueError, IndexError or struct errors on a bad header
        raise _damaged(
            model,
            file,
            "has a GGUF header that does not parse or does not fit the file's size "
            f"({type(err).__name__}: {brief(err)})",
        ) from err
    size = file.stat().st_size
    if end > size:
        raise _damaged(model, file, f"is {size} bytes but its tensors end at byte {end} (cut short)")


def check_template(model: ModelConfig, prompt: PromptConfig) -> None:
    """A scan scores every document's first token from the position before it, so its template must open
    with at least one uncounted token: refused here, from the tokenizer alone (no weights), before a run
    directory exists. A hub id is left to the worker (it cannot be read offline here)."""
    from scanner.engine.loading import load_tokenizer
    from scanner.engine.template import build_template

    if model_source(model.model) == "hub":
        return
    tokenizer, file_adds_bos = load_tokenizer(model)
    template = build_template(tokenizer, prompt, file_adds_bos)  # refuses --chat without a template, ...
    if not template.prefix_ids:
        raise InputError(
            f"--model {model.model} with --bos {prompt.bos}: the input would open on a document's "
            "first token, which then has no position before it to be predicted from; pass "
            "--bos auto (the BOS or the document separator), --bos always or --chat"
        )
    log.info("template of %s: %s", model.model, template.bos_policy)
