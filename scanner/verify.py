"""`acr-scan verify`: re-check a run's evidence by greedy generation, from the results table alone."""

from __future__ import annotations

import json

from scanner.config import ModelConfig, PromptConfig
from scanner.engine.hf import HFEngine
from scanner.engine.loading import load_model
from scanner.rundir import RunDir


def verify_run(run_dir: str, model: str | None = None) -> tuple[list[dict], int]:
    """(rows that no longer reproduce, rows checked) over every memorized span of the run."""
    run = RunDir(run_dir)
    saved = json.loads((run.path / "run_config.json").read_text())["config"]
    model_config = ModelConfig(**{**saved["model"], "model": model or saved["model"]["model"]})
    engine = HFEngine(load_model(model_config), PromptConfig(**saved["prompt"]))
    flagged = [r for r in run.read_results().to_pylist() if r["status"] == "memorized"]
    failures = []
    for row in flagged:
        check = engine.verify(row["prompt"], row["target_ids"])
        if not check.verified_generation:
            failures.append({**row, "matched": check.matched_tokens})
    return failures, len(flagged)
