"""`acr-scan verify`: re-check a run's evidence by greedy generation, from the results table alone."""

from __future__ import annotations

from dataclasses import replace

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
