"""`acr-scan export RUN --bundle DIR`: evidence anyone re-verifies without trusting this package.

The bundle holds the flagged rows (evidence.jsonl, the export's columns), the run's configuration and
provenance as the run directory keeps them, the model's identity (model.json: the run's own record, made
when the scan started, of the sha256 of every weight, tokenizer and config file; hub id and revision
where known; checked against the digest run_config.json seals, not hashed again at export, and a --model
with other bytes is refused), the run's
denominators and whether it was complete (denominators.json), the scan's engine, dtype and device and the
library versions at export (environment.json), the input recipe (recipe.json: the fixed text and ids
around the prompt, BOS, EOS), a standalone re-check (recheck.py: torch and transformers only), a README,
and manifest.json with the sha256 of every other file; with --sign KEY, manifest.json.sig
(results/signing.py). It is written beside DIR and renamed into place, so a bundle is whole or absent.
`acr-scan verify --bundle` (results/verify.py) checks all of it.
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

import pyarrow as pa
import pyarrow.compute as pc

from scanner import __version__
from scanner.config import ModelConfig, PromptConfig
from scanner.confine import inside
from scanner.engine.identity import files_digest, model_identity, record_problems
from scanner.engine.recipe import input_recipe
from scanner.errors import require
from scanner.results import recheck
from scanner.results.denominators import denominators
from scanner.results.export import RUN_FLAG, WRITERS, select_rows
from scanner.results.report_shared import shared_spans, treatment
from scanner.results.signing import sign_manifest
from scanner.storage.model_record import read_record
from scanner.storage.passages import passages_if_built, read_passages
from scanner.storage.rundir import RunDir
from scanner.storage.status import progress

EVIDENCE, MANIFEST, MODEL, RECIPE, ENVIRONMENT = (
    "evidence.jsonl",
    "manifest.json",
    "model.json",
    "recipe.json",
    "environment.json",
)
DENOMINATORS, SIGNATURE = "denominators.json", recheck.SIGNATURE
COPIED = ("run_config.json", "provenance.json")  # as the run directory holds them, byte for byte
LIBRARIES = (
    "torch",
    "transformers",
    "tokenizers",
    "safetensors",
    "huggingface_hub",
    "accelerate",
    "vllm",
    "pyarrow",
    "numpy",
)
NEEDED = ("prompt", "target_ids", "prompt_ids")
README = """# acr-scanner evidence bundle

Every row of evidence.jsonl is a span of text and a prompt string that, typed into the model named in
model.json (files identified by sha256, recorded when the scan started) as recipe.json says, makes
greedy decoding reproduce the span. denominators.json says what the rows were drawn from and whether
the scan was complete when they were exported, and (shared_text) how text that many documents hold
(a publisher's header, a licence) was treated: the threshold in documents, how many such texts, passages
and spans the run found, and whether these rows leave them out.

Re-check every row with torch and transformers only (not acr-scanner):

    python recheck.py --model PATH_TO_THE_MODEL --expect MANIFEST_SHA256 [--signer KEY.pub]

It first checks every file against manifest.json, manifest.json's sha256 against the published figure
(--expect), its signature (manifest.json.sig, if --signer) and the model's files against model.json,
and generates nothing if one differs; then it prints each row's match and the smallest logit margin of
the generation (add --dtype float32 for another numeric path); exit 0 iff all match. With acr-scanner
installed, `acr-scan verify --bundle THIS_FOLDER --model PATH --expect SHA256` checks the same.
A signature is also checked by `ssh-keygen -Y verify -n acr-scanner-bundle -s manifest.json.sig`.

Files: evidence.jsonl (the rows), run_config.json and provenance.json (the run's configuration and
provenance), model.json, denominators.json, environment.json (the scan's engine, dtype and device;
library versions at export), recipe.json, recheck.py, manifest.json (sha256 of every other file; publish
its own sha256), manifest.json.sig (when signed).
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
    engines = sorted(
        {json.dumps([r.get("verify_engine"), r.get("verify_version"), r.get("verify_dtype")]) for r in rows}
    )
    scan = {
        "dtype": provenance.get("dtype"),
        "device": provenance.get("device"),
        "bos": provenance.get("bos"),
        "acr_scanner": provenance.get("package_version"),
        "verify_engine": json.loads(provenance.get("verify_engine") or "null"),
        "screen_engine": json.loads(provenance.get("screen_engine") or "null"),
        "rows_verified_by": [
            dict(zip(("engine", "version", "dtype"), json.loads(e), strict=True)) for e in engines
        ],
    }
    return {
        "scan": scan,
        "export": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "libraries": _versions(),
        },
    }


def model_json(run: RunDir, model_config: ModelConfig, model: str | None) -> dict:
    """The run's record of its model's files, checked against the digest its run_config.json seals (a
    hand-edited model.json is refused); a --model whose files are other bytes is refused."""
    record = read_record(run.path)
    sealed = run.saved_config().get("model_files")  # saved_config: the run_hash holds
    config = run.path / "run_config.json"
    require(
        sealed is not None,
        f"{config} seals no digest of the model's files, so {run.path / MODEL} "
        "cannot be checked (the run was not prepared by acr-scan's scan driver); scan again into a new "
        "--out",
    )
    digest = files_digest(record["files"])
    require(
        digest == sealed,
        f"{run.path / MODEL} is not the record of the model this run scanned: its "
        f"files' digest {digest[:12]} is not the {sealed[:12]} that {config} seals (a hand edit); restore "
        "model.json as the scan wrote it, or scan again into a new --out",
    )
    if model is not None:
        problems = record_problems(record["files"], model_identity(model_config)["files"])
        require(
            not problems,
            f"--model {model}: not the model this run scanned ({run.path / MODEL} recorded "
            f"its files when the scan started): {'; '.join(problems[:5])}; pass the folder that holds those "
            "files, or leave --model out (model.json comes from the run's record)",
        )
    return record


def completeness(
    run: RunDir, table, tau: str, calibrated: bool, rows: int, shared: dict | None = None
) -> dict:
    """denominators.json: the run's counts, whether it was complete, the selection the rows are and how
    they treated shared text (`shared`, report_shared.treatment)."""
    state = progress(run)
    plan = run.load_plan()
    return {
        "complete": state["phase"] == "complete",
        "phase": state["phase"],
        "shards_done": len(run.done_shards()),
        "shards_total": len(plan),
        "documents_total": plan.num_docs,
        "run": denominators(table),
        "selection": {"tau": tau, "calibrated": calibrated},
        "rows": rows,
        # What the budget and the screen left unsearched, estimated from the recall audit (null without one)
        "recall": run.recall(),
        **({"shared_text": shared} if shared else {}),
    }


def without_shared(rows, passages, leave_out: bool) -> tuple:
    """The rows less the spans of shared-text passages when `leave_out` (--without-shared-text), and how
    many that left out."""
    if not leave_out:
        return rows, 0
    kept = rows.filter(
        pc.invert(pc.is_in(rows["span_id"], value_set=pa.array(shared_spans(passages), pa.string())))
    )
    return kept, rows.num_rows - kept.num_rows


def bundle_files(
    run: RunDir, tau: str, calibrated: bool, model: str | None, leave_out_shared: bool = False
) -> dict[str, bytes]:
    """Every file of the bundle but the manifest, by name; `leave_out_shared`: --without-shared-text."""
    table = run.read_results()
    passages = read_passages(run) if leave_out_shared else passages_if_built(run)  # the former names the fix
    rows, left = without_shared(select_rows(table, tau, calibrated=calibrated), passages, leave_out_shared)
    shared = {**treatment(table, passages, leave_out_shared), "rows_left_out": left}
    missing = [c for c in NEEDED if c not in rows.column_names]
    require(
        not missing,
        f"the run's results lack {missing}, which a re-check needs (every results table "
        "acr-scan writes holds them); scan it again into a new run directory",
    )
    for name in COPIED:
        require(
            (run.path / name).is_file(),
            f"{run.path / name} is missing: the run never loaded its model "
            "(no provenance); relaunch the scan",
        )
    config = run.saved_config()["config"]
    model_config = ModelConfig(**{**config["model"], "model": model or config["model"]["model"]})
    evidence = io.BytesIO()
    WRITERS[".jsonl"](rows, evidence)
    # Copied through the one confinement rule: a link in the run directory must not put a file from
    # elsewhere on this machine into a bundle meant to be published.
    copied = {name: inside(run.path, name, f"the run directory {run.path}").read_bytes() for name in COPIED}
    provenance = json.loads(copied["provenance.json"])
    return {
        EVIDENCE: evidence.getvalue(),
        **copied,
        MODEL: _json(model_json(run, model_config, model)),
        DENOMINATORS: _json(completeness(run, table, tau, calibrated, rows.num_rows, shared)),
        ENVIRONMENT: _json(environment(provenance, rows.to_pylist())),
        RECIPE: _json(input_recipe(model_config, PromptConfig(**config["prompt"]))),
        "recheck.py": Path(recheck.__file__).read_bytes(),
        "README.md": README.encode("utf-8"),
    }


def manifest(files: dict[str, bytes]) -> dict:
    return {
        "algorithm": "sha256",
        "files": {
            name: {"sha256": sha256_bytes(data), "bytes": len(data)} for name, data in sorted(files.items())
        },
    }


def write_bundle(
    run: RunDir,
    out: str | Path,
    tau: str = RUN_FLAG,
    calibrated: bool = False,
    model: str | None = None,
    sign: str | None = None,
    leave_out_shared: bool = False,
) -> dict:
    """Write the bundle into `out` (absent or an empty folder); returns its rows, files, whether the run
    was complete and the sha256 of its manifest (the one figure to publish beside the evidence); `sign`:
    an ssh-ed25519 private key that signs the manifest (manifest.json.sig); `leave_out_shared`: the spans
    of shared-text passages left out (--without-shared-text; denominators.json says so either way)."""
    out = Path(out)
    require(
        not out.exists() or (out.is_dir() and not any(out.iterdir())),
        f"--bundle {out}: exists and is not an empty folder; name a new folder (a bundle is never mixed "
        "with other files)",
    )
    files = bundle_files(run, tau, calibrated, model, leave_out_shared)
    index = _json(manifest(files))
    signature = {SIGNATURE: sign_manifest(index, sign)} if sign is not None else {}
    temp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(temp, ignore_errors=True)
    temp.mkdir(parents=True)
    for name, data in {**files, MANIFEST: index, **signature}.items():
        (temp / name).write_bytes(data)
    if out.exists():
        out.rmdir()
    os.replace(temp, out)
    rows = sum(1 for line in files[EVIDENCE].splitlines() if line.strip())
    return {
        "rows": rows,
        "files": len(files) + 1 + len(signature),
        "manifest_sha256": sha256_bytes(index),
        "complete": json.loads(files[DENOMINATORS])["complete"],
        "signed": bool(signature),
    }
