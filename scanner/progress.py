"""The driver's progress bar: spans, candidates, memorized, spans per second, ETA (tqdm's)."""

from __future__ import annotations

from tqdm import tqdm

from scanner.runner import ScanConfig
from scanner.scan import prepare_run, run_scan, with_failures


def run_with_progress(config: ScanConfig, out: str) -> dict:
    _, run, plan = prepare_run(config, out)  # validates before any model loads
    pending = run.pending(plan) + with_failures(run, plan)
    totals = {"candidates": 0, "memorized": 0}
    with tqdm(total=sum(s.num_docs for s in pending), unit="doc", desc="scan", dynamic_ncols=True) as bar:
        def advance(stats: dict) -> None:
            totals["candidates"] += stats["candidates"]
            totals["memorized"] += stats["memorized"]
            bar.update(stats["documents"])
            spans_per_s = stats["spans"] / stats["seconds"] if stats["seconds"] else 0.0
            bar.set_postfix(spans=stats["spans"], candidates=totals["candidates"],
                            memorized=totals["memorized"], spans_s=f"{spans_per_s:.1f}")
        return run_scan(config, out, progress=advance)
