"""The library benchmark's model: a tokenizer trained on the corpus and a tiny Llama trained on all of it.

The model sees the training text (every document with its plants and rule text, the held-out passages
left out) for `epochs` passes of random windows (scanner/studies/tiny.py's trainer), so a passage
planted `count` times is seen about count x epochs times. Built once into WORK/library/ (the documents
as .txt files, truth.json with every planted region, trained.txt with the training text, model/ with
the tokenizer) and reused while the
spec and the text read from this machine's files are the same (library.json).
"""

from __future__ import annotations

import json
import logging
import math
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from library_corpus import Library, LibrarySpec, build

log = logging.getLogger("library")


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    vocab: int = 1024  # the LM head dominates a model this small: 1024 trains 2.2x faster than 2048
    hidden: int = 64
    layers: int = 2
    heads: int = 4
    context: int = 256
    train_context: int = 128
    batch: int = 32
    lr: float = 5e-3
    epochs: float = 3.0
    seed: int = 0


def count_tokens(tokenizer, texts: list[str]) -> int:
    return sum(len(ids) for ids in tokenizer(texts, add_special_tokens=False).input_ids)


def corpus_to_size(spec: LibrarySpec, model: ModelSpec, chars: int | None):
    """The corpus and its tokenizer, grown until the scanned text holds `spec.tokens` tokens: the
    characters a token covers depend on the files found, so the first guess is corrected once or twice."""
    from scanner.studies.tiny import train_tokenizer

    chars = chars or int(spec.tokens * 2.6)
    for _ in range(4):
        lib = build(spec, chars)
        tokenizer = train_tokenizer(lib.trained, model.vocab)
        tokens = count_tokens(tokenizer, lib.scanned)
        if tokens >= spec.tokens:
            return lib, tokenizer, tokens, chars
        chars = int(chars * spec.tokens / tokens * 1.03) + 1
    raise ValueError(f"{tokens} tokens in {len(lib.scanned)} documents, {spec.tokens} asked: this machine has too "
                     "little text; lower --tokens")


def train(lib: Library, tokenizer, model: ModelSpec, out: Path) -> dict:
    from scanner.studies.tiny import _stream, train_model
    from scanner.studies.validity import ModelSize

    tokens = len(_stream(tokenizer, lib.trained))
    steps = max(1, math.ceil(model.epochs * tokens / (model.batch * model.train_context)))
    size = ModelSize(name="library", hidden=model.hidden, layers=model.layers, heads=model.heads, batch=model.batch,
                     lr=model.lr, steps=steps, context=model.context, train_context=model.train_context,
                     seed=model.seed)
    start = time.perf_counter()
    trained = train_model(tokenizer, lib.trained, size)
    seconds = time.perf_counter() - start
    trained.save_pretrained(out)
    tokenizer.save_pretrained(out)
    params = sum(p.numel() for p in trained.parameters())
    return {"train_tokens": tokens, "steps": steps, "train_s": round(seconds, 1), "parameters": params}


def write_documents(lib: Library, folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for name, text in zip(lib.names, lib.scanned, strict=True):
        (folder / name).write_text(text, encoding="ascii")


def build_library(work: Path, spec: LibrarySpec, model: ModelSpec) -> dict:
    """WORK/library/{docs/, truth.json, model/}, built or reused; returns library.json's record."""
    root = work / "library"
    marker = root / "library.json"
    key = {"spec": asdict(spec), "model": asdict(model)}
    saved = json.loads(marker.read_text()) if marker.is_file() else None
    saved = saved if saved and saved["key"] == json.loads(json.dumps(key)) else None
    if saved:
        start = time.perf_counter()
        lib = build(spec, saved["chars"])  # the same files still give the same text?
        if lib.truth()["sha256"] == saved["sha256"]:
            log.info("reusing the library and model in %s", root)
            return {**saved, "reuse_check_s": round(time.perf_counter() - start, 1), "reused": True}
    start = time.perf_counter()
    lib, tokenizer, tokens, chars = corpus_to_size(spec, model, saved and saved.get("chars"))
    collect_s = round(time.perf_counter() - start, 1)
    root.mkdir(parents=True, exist_ok=True)
    write_documents(lib, root / "docs")
    (root / "truth.json").write_text(json.dumps(lib.truth()))
    (root / "trained.txt").write_text("\n\n".join(lib.trained))  # what a flagged span is looked up in
    log.info("library: %d documents, %d tokens; training", len(lib.names), tokens)
    trained = train(lib, tokenizer, model, root / "model")
    record = {"key": key, "chars": chars, "sha256": lib.truth()["sha256"], "documents": len(lib.names),
              "scanned_chars": sum(map(len, lib.scanned)), "scanned_tokens": tokens, "collect_s": collect_s,
              **trained}
    marker.write_text(json.dumps(record, indent=1))
    return {**record, "reused": False}
