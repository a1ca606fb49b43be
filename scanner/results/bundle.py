"""`acr-scan export RUN --bundle DIR`: evidence anyone re-verifies without trusting this package.

The bundle holds the flagged rows (evidence.jsonl, the export's columns), the run's configuration and
provenance as the run directory keeps them, the model's identity (sha256 of every weight, tokenizer and
config file; hub id and revision where known: model.json), the scan's engine, dtype and device and the
library versions at export (environment.json), the input recipe (recipe.json: the fixed text and ids
around the prompt, BOS, EOS), a standalone re-check (recheck.py: torch and transformers only), a README,
and manifest.json with the sha256 of every other file. It is written beside DIR and renamed into place,
so a bundle is whole or absent. `acr-scan verify --bundle` (results/verify.py) checks all of it.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import shutil
from importlib import metadata
from pathlib import Path

from scanner import __version__
from scanner.config import ModelConfig, PromptConfig
from scanner.confine import inside
from scanner.engine.identity import model_identity
from scanner.engine.recipe import input_recipe
from scanner.errors import require
from scanner.results import recheck
from scanner.results.export import RUN_FLAG, WRITERS, select_rows
from scanner.storage.rundir import RunDir

EVIDENCE, MANIFEST, MODEL, RECIPE, ENVIRONMENT = "evidence.jsonl", "manifest.json", "model.json", "recipe.json", "environment.json"
COPIED = ("run_config.json", "provenance.json")  # as the run directory holds them, byte for byte
LIBRARIES = ("torch", "transformers", "tokenizers", "safetensors", "huggingface_hub", "accelerate", "vllm",
             "pyarrow", "numpy")
NEEDED = ("prompt", "target_ids", "prompt_ids")
README = """# acr-scanner evidence bundle

Every row of evidence.jsonl is a span of text and a prompt string that, typed into the model named in
model.json (files identified by sha256) as recipe.json says, makes greedy decoding reproduce the span.

Re-check every row with torch and transformers only (not acr-scanner):

    python recheck.py --model PATH_TO_THE_MODEL      # add --dtype float32 for another numeric path

It prints each row's match and the smallest logit margin of the generation; exit 0 iff all match.
With acr-scanner installed, `acr-scan verify --bundle THIS_FOLDER --model PATH` also checks every file
against manifest.json (an edited byte is named) and the model's files against model.json.

Files: evidence.jsonl (the rows), run_config.json and provenance.json (the run's configuration and
provenance), model.json, environment.json (the scan's engine, dtype and device; library versions at
export), recipe.json, recheck.py, manifest.json (sha256 of every other file; publish its own sha256).
"""


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _json(value) -> bytes:
    return (json.dumps(value, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def _versions() -> dict:
    out = {}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return {**out, "acr-scanner": __version__}


def environment(provenance: dict, rows: list[dict]) -> dict:
    """The scan's numeric path (engines, dtype, device: from its provenance and rows) and this export's."""
    engines = sorted({json.dumps([r.get("verify_engine"), r.get("verify_version"), r.get("verify_dtype")])
                      for r in rows})
    scan = {"dtype": provenance.get("dtype"), "device": provenance.get("device"), "bos": provenance.get("bos"),
            "acr_scanner": provenance.get("package_version"),
            "verify_engine": json.loads(provenance.get("verify_engine") or "null"),
            "screen_engine": json.loads(provenance.get("screen_engine") or "null"),
            "rows_verified_by": [dict(zip(("engine", "version", "dtype"), json.loads(e), strict=True)) for e in engines]}
    return {"scan": scan, "export": {"python": platform.python_version(), "platform": platform.platform(),
                                     "libraries": _versions()}}


def bundle_files(run: RunDir, tau: str, calibrated: bool, model: str | None) -> dict[str, bytes]:
    """Every file of the bundle but the manifest, by name."""
    rows = select_rows(run.read_results(), tau, calibrated=calibrated)
    missing = [c for c in NEEDED if c not in rows.column_names]
    require(not missing, f"the run's results lack {missing}, which a re-check needs (a run made before they "
            "were recorded); scan it again into a new run directory")
    for name in COPIED:
        require((run.path / name).is_file(), f"{run.path / name} is missing: the run never loaded its model "
                "(no provenance); relaunch the scan")
    config = run.saved_config()["config"]
    model_config = ModelConfig(**{**config["model"], "model": model or config["model"]["model"]})
    evidence = io.BytesIO()
    WRITERS[".jsonl"](rows, evidence)
    # Copied through the one confinement rule: a link in the run directory must not put a file from
    # elsewhere on this machine into a bundle meant to be published.
    copied = {name: inside(run.path, name, f"the run directory {run.path}").read_bytes() for name in COPIED}
    provenance = json.loads(copied["provenance.json"])
    return {EVIDENCE: evidence.getvalue(), **copied,
            MODEL: _json(model_identity(model_config)),
            ENVIRONMENT: _json(environment(provenance, rows.to_pylist())),
            RECIPE: _json(input_recipe(model_config, PromptConfig(**config["prompt"]))),
            "recheck.py": Path(recheck.__file__).read_bytes(), "README.md": README.encode("utf-8")}


def manifest(files: dict[str, bytes]) -> dict:
    return {"algorithm": "sha256", "files": {name: {"sha256": sha256_bytes(data), "bytes": len(data)}
                                             for name, data in sorted(files.items())}}


def write_bundle(run: RunDir, out: str | Path, tau: str = RUN_FLAG, calibrated: bool = False,
                 model: str | None = None) -> dict:
    """Write the bundle into `out` (absent or an empty folder); returns its rows, files and the sha256
    of its manifest (the one figure to publish beside the evidence)."""
    out = Path(out)
    require(not out.exists() or (out.is_dir() and not any(out.iterdir())),
            f"--bundle {out}: exists and is not an empty folder; name a new folder (a bundle is never mixed "
            "with other files)")
    files = bundle_files(run, tau, calibrated, model)
    index = _json(manifest(files))
    temp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(temp, ignore_errors=True)
    temp.mkdir(parents=True)
    for name, data in {**files, MANIFEST: index}.items():
        (temp / name).write_bytes(data)
    if out.exists():
        out.rmdir()
    os.replace(temp, out)
    rows = sum(1 for line in files[EVIDENCE].splitlines() if line.strip())
    return {"rows": rows, "files": len(files) + 1, "manifest_sha256": sha256_bytes(index)}
