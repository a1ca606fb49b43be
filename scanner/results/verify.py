"""`acr-scan verify`: re-check evidence by greedy generation, from a run's results table or a bundle.

A re-check may take another numeric path than the scan (`dtype`: float32 against the scan's bf16;
`verify_engine`: vLLM against HF): every flagged prompt is generated again there, and every row it no
longer reproduces is a disagreement, listed. Its margins say how robust each success is on that path.
A bundle (results/bundle.py) is checked first for what a re-check cannot see: every file against its
manifest (an edited byte is named by file), the model's files against model.json, the input recipe.
The flagged spans are counted apart by whose words their prompts hold (prompt_source,
measures/overlap.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import pyarrow as pa

from scanner.config import ModelConfig, ScanConfig, from_saved
from scanner.confine import inside
from scanner.engine.identity import identity_problems
from scanner.engine.recipe import recipe, recipe_problems
from scanner.errors import InputError, require
from scanner.results import recheck
from scanner.results.bundle import EVIDENCE, MANIFEST, MODEL, RECIPE, SIGNATURE, sha256_bytes
from scanner.storage.rundir import RunDir


@dataclass(frozen=True)
class Check:
    """One flagged row generated again on the re-check's path."""

    row: dict
    reproduced: bool
    matched: int
    generation_margin: float | None
    generation_margin_at: int | None
    fragile: bool | None
    retyped: bool  # the prompt string typed into other ids than the evidence records (another tokenizer)


@dataclass(frozen=True)
class Recheck:
    path: dict  # the verify engine's info on this re-check: engine, version, dtype, flags (device)
    fragile_below: float
    checks: list[Check]
    problems: list[str]  # a bundle's: files edited or missing, another model file, another recipe

    @property
    def disagreements(self) -> list[Check]:
        return [c for c in self.checks if not c.reproduced]

    @property
    def fragile(self) -> list[Check]:
        return [c for c in self.checks if c.fragile]

    @property
    def ok(self) -> bool:
        return not self.problems and not self.disagreements


def open_engine(saved: ScanConfig, model: str | None, dtype: str | None, verify_engine: str | None):
    """The HF engine (and vLLM where asked) of a run's saved configuration, on another path if given."""
    from scanner.engine.build import build_engines

    model_config = replace(
        saved.model, model=model or saved.model.model, **({"dtype": dtype} if dtype else {})
    )
    engines = replace(saved.engines, screen="hf", **({"verify": verify_engine} if verify_engine else {}))
    return build_engines(model_config, saved.prompt, engines)


def recheck_rows(
    engine, rows: list[dict], fragile_below: float, problems: list[str] | None = None
) -> Recheck:
    checks = []
    for row in rows:
        check = engine.verify(row["prompt"], list(row["target_ids"]))
        margin = check.generation_margin
        recorded = row.get("prompt_ids")
        checks.append(
            Check(
                row=row,
                reproduced=check.verified_generation,
                matched=check.matched_tokens,
                generation_margin=margin,
                generation_margin_at=check.generation_margin_at,
                fragile=None if margin is None else margin < fragile_below,
                retyped=recorded is not None
                and check.prompt_ids is not None
                and list(recorded) != check.prompt_ids,
            )
        )
    return Recheck(
        path=engine.verify_info(), fragile_below=fragile_below, checks=checks, problems=problems or []
    )


def _fragile_below(saved: ScanConfig, fragile_margin: float | None) -> float:
    return saved.search.fragile_margin if fragile_margin is None else fragile_margin


def verify_run(
    run_dir: str,
    model: str | None = None,
    dtype: str | None = None,
    verify_engine: str | None = None,
    fragile_margin: float | None = None,
) -> Recheck:
    """Every memorized span of the run generated again (on another path where `dtype`/`verify_engine` say)."""
    run = RunDir(run_dir)
    saved = run.scan_config()
    flagged = [r for r in run.read_results().to_pylist() if r["status"] == "memorized"]
    engine = open_engine(saved, model, dtype, verify_engine)
    try:
        return recheck_rows(engine, flagged, _fragile_below(saved, fragile_margin))
    finally:
        engine.close()


def manifest_problems(folder: Path) -> list[str]:
    """One line per file that differs from manifest.json: edited (sha256), missing, or not listed. A name
    that would leave the bundle is refused before any file is opened: a manifest must not make verify
    read, and tell the hash of, a file elsewhere."""
    listed = manifest_entries(_read_json(folder, MANIFEST))
    paths = {name: inside(folder, name, f"the bundle's {MANIFEST}") for name in sorted(listed)}
    problems = []
    for name, path in paths.items():
        entry = listed[name]
        if not path.is_file():
            problems.append(f"{name}: listed in {MANIFEST} but missing")
        elif sha256_bytes(path.read_bytes()) != entry["sha256"]:
            problems.append(f"{name}: edited since the bundle was written (sha256 differs from {MANIFEST})")
    extra = sorted(
        p.name for p in folder.iterdir() if p.name not in listed and p.name not in (MANIFEST, SIGNATURE)
    )
    problems += [f"{name}: not in {MANIFEST} (added after the bundle was written)" for name in extra]
    return problems


def manifest_entries(index: dict) -> dict[str, dict]:
    """manifest.json's {"files": {name: {"sha256": hex, ...}}}, checked (InputError naming what is wrong)."""
    files = index.get("files")
    require(
        isinstance(files, dict),
        f'{MANIFEST}: "files" is {type(files).__name__}, not an object of file '
        'name -> {"sha256"}; the bundle is damaged: get the manifest as published',
    )
    wrong = sorted(
        repr(name)
        for name, entry in files.items()
        if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str)
    )
    require(
        not wrong,
        f"{MANIFEST}: the entries of {', '.join(wrong[:3])} hold no sha256 string; the bundle is "
        "damaged: get the manifest as published",
    )
    return files


def bundle_file(folder: Path, name: str) -> Path:
    """A file of the bundle, inside it (no link leading out), present (InputError naming it if not)."""
    path = inside(folder, name, f"the bundle {folder}")
    require(
        path.is_file(),
        f"the bundle's {name} is missing from {folder} (deleted, or the folder was copied "
        "in part); get the whole bundle as published",
    )
    return path


def published_problems(folder: Path, expect: str | None, signer: str | None) -> list[str]:
    """manifest.json against the figure published with the evidence (--expect) and its signature
    (--signer): what ties the manifest, and through it every file, to whoever published it."""
    data = bundle_file(folder, MANIFEST).read_bytes()
    problems = []
    if expect is not None and sha256_bytes(data) != expect.strip().lower():
        problems.append(
            f"{MANIFEST}: sha256 {sha256_bytes(data)} is not the expected {expect} (--expect); this "
            "is not the bundle that was published"
        )
    if signer is not None:
        try:
            problems += recheck.signature_problems(folder, data, signer)
        except recheck.Refused as err:  # --signer is no key file: the user's to fix (exit 2)
            raise InputError(str(err)) from err
    return problems


def _read_json(folder: Path, name: str) -> dict:
    path = bundle_file(folder, name)
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise InputError(f"{path} is not JSON ({err}); the bundle is damaged") from err
    require(isinstance(value, dict), f"{path} is not a JSON object; the bundle is damaged")
    return value


def model_record(folder: Path) -> dict:
    """model.json, checked: {"files": [{"path", "role", "sha256"}, ...]} (InputError naming what is wrong)."""
    record = _read_json(folder, MODEL)
    files = record.get("files")
    fields = ("path", "role", "sha256")
    require(
        isinstance(files, list)
        and all(isinstance(f, dict) and all(isinstance(f.get(k), str) for k in fields) for f in files),
        f'{MODEL}: "files" is not a list of {{"path", "role", "sha256"}} strings; the bundle is damaged',
    )
    # No weight listed, nothing compared: it "matched" any model.
    require(
        any(f["role"] == "weight" for f in files),
        f"{MODEL} lists no weight file of the model, so nothing ties "
        "the evidence to a model; the bundle is damaged or was altered: get it as published",
    )
    return record


def bundle_config(folder: Path, model: str) -> ScanConfig:
    """run_config.json's "config", read as a run's is (config.from_saved; InputError if it is none)."""
    saved = _read_json(folder, "run_config.json").get("config")
    try:
        return replace(
            from_saved(ScanConfig, saved, "the bundle's run_config.json"),
            model=replace(from_saved(ModelConfig, saved["model"], "run_config.json"), model=model),
        )
    except (InputError, KeyError, TypeError) as err:
        raise InputError(
            f"the bundle's run_config.json is not a run configuration ({err}); the bundle is damaged"
        ) from err


def _ids(value, nullable: bool = False) -> bool:
    """A list of token ids (ints >= 0; not bools), or None where `nullable`."""
    if value is None:
        return nullable
    return isinstance(value, list) and all(
        isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value
    )


def evidence_rows(folder: Path, problems: list[str]) -> list[dict]:
    """The rows of evidence.jsonl; a line that is no row is a problem (named by its line), not a crash."""
    rows = []
    text = bundle_file(folder, EVIDENCE).read_text(encoding="utf-8", errors="replace")
    for number, line in enumerate(text.splitlines(), 1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            problems.append(f"{EVIDENCE} line {number}: not JSON ({err.msg}); the row cannot be re-checked")
            continue
        if (
            isinstance(row, dict)
            and isinstance(row.get("prompt"), str)
            and _ids(row.get("target_ids"))
            and row["target_ids"]
            and _ids(row.get("prompt_ids"), nullable=True)
        ):
            rows.append(row)
        else:
            problems.append(
                f"{EVIDENCE} line {number}: no prompt string and target_ids (a list of token ids); "
                "it cannot be re-checked"
            )
    return rows


def in_vocabulary(rows: list[dict], size: int, problems: list[str]) -> list[dict]:
    """The rows whose target ids the model has; each other one is a problem, not a crash of generation."""
    kept = []
    for row in rows:
        outside = [i for i in row["target_ids"] if i >= size]
        if outside:
            problems.append(
                f"{EVIDENCE} row {row.get('span_id')!r}: target id {outside[0]} is outside the model's "
                f"vocabulary of {size}; it cannot be re-checked with this model"
            )
        else:
            kept.append(row)
    return kept


def vocabulary_size(engine) -> int:
    """Rows of the model's input embedding: the ids a re-check may feed it (teacher-forced margins)."""
    return engine.model.get_input_embeddings().num_embeddings


def verify_bundle(
    bundle: str,
    model: str,
    dtype: str | None = None,
    verify_engine: str | None = None,
    fragile_margin: float | None = None,
    expect: str | None = None,
    signer: str | None = None,
) -> Recheck:
    """The manifest (against --expect and --signer), the model's files, the input recipe, then every row
    generated again from `model`."""
    folder = Path(bundle)
    require(
        folder.is_dir(),
        f"--bundle {bundle}: no such folder; pass the folder `acr-scan export --bundle` wrote",
    )
    problems = manifest_problems(folder)
    problems += published_problems(folder, expect, signer)
    problems += identity_problems(model_record(folder), model)
    saved = bundle_config(folder, model)
    rows = evidence_rows(folder, problems)
    recorded = _read_json(folder, RECIPE)
    engine = open_engine(saved, model, dtype, verify_engine)
    try:
        now = recipe(engine.template, engine.stop_ids(), saved.model.trust_remote_code)
        problems += recipe_problems(recorded, now)
        rows = in_vocabulary(rows, vocabulary_size(engine), problems)
        return recheck_rows(engine, rows, _fragile_below(saved, fragile_margin), problems)
    finally:
        engine.close()


def by_prompt_source(table: pa.Table, failures: list[dict]) -> dict[str, dict[str, int]]:
    """{prompt_source: {"flagged", "reproduced"}} over the memorized spans (None: no prompt_source, a table
    made before prompts were measured)."""
    failed = {row["span_id"] for row in failures}
    columns = [c for c in ("span_id", "status", "prompt_source") if c in table.column_names]
    out: dict = {}
    for row in table.select(columns).to_pylist():
        if row["status"] == "memorized":
            counts = out.setdefault(row.get("prompt_source"), {"flagged": 0, "reproduced": 0})
            counts["flagged"] += 1
            counts["reproduced"] += row["span_id"] not in failed
    return out


def prompt_source_line(table: pa.Table, failures: list[dict]) -> str:
    """e.g. "free prompts: 3/3 reproduce; work_text prompts (certificates or k+ tokens of the work): 9/9"."""
    names = {
        "free": "prompts free of the work's text",
        "work_text": "prompts holding the work's text",
        None: "prompts not measured",
    }
    counts = by_prompt_source(table, failures)
    parts = [
        f"{names[key]}: {counts[key]['reproduced']}/{counts[key]['flagged']} reproduce"
        for key in names
        if key in counts
    ]
    return "; ".join(parts) if parts else "no flagged spans"
