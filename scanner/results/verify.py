"""`acr-scan verify`: re-check a run's evidence by greedy generation, from the results table alone; the
flagged spans are counted apart by whose words their prompts hold (prompt_source, measures/overlap.py)."""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa

from scanner.config import EngineConfig, ModelConfig, PromptConfig
from scanner.engine.build import build_engines
from scanner.storage.rundir import RunDir


def verify_run(run_dir: str, model: str | None = None) -> tuple[list[dict], int]:
    """(rows that no longer reproduce, rows checked) over every memorized span of the run."""
    run = RunDir(run_dir)
    saved = run.saved_config()["config"]
    model_config = ModelConfig(**{**saved["model"], "model": model or saved["model"]["model"]})
    # The run's verify engine (a run saved before engines were configurable verified with hf).
    engines = EngineConfig(**saved.get("engines", {"verify": "hf", "screen": "hf"}))
    engine = build_engines(model_config, PromptConfig(**saved["prompt"]), replace(engines, screen="hf"))
    flagged = [r for r in run.read_results().to_pylist() if r["status"] == "memorized"]
    failures = []
    for row in flagged:
        check = engine.verify(row["prompt"], row["target_ids"])
        if not check.verified_generation:
            failures.append({**row, "matched": check.matched_tokens})
    return failures, len(flagged)


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
    names = {"free": "prompts free of the work's text", "work_text": "prompts holding the work's text",
             None: "prompts not measured"}
    counts = by_prompt_source(table, failures)
    parts = [f"{names[key]}: {counts[key]['reproduced']}/{counts[key]['flagged']} reproduce" for key in names
             if key in counts]
    return "; ".join(parts) if parts else "no flagged spans"
