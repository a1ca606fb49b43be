"""The driver's progress bar: spans, candidates, memorized, spans per second, ETA (tqdm's)."""

from __future__ import annotations

from tqdm import tqdm

from scanner.config import ExecutorConfig, PassageConfig, ScanConfig
from scanner.run.driver import run_scan


class ProgressBar:
    """`run_scan`'s progress: `start(documents)` once the run directory is prepared, then one call
    per screened shard."""

    def __init__(self) -> None:
        self.bar: tqdm | None = None
        self.totals = {"candidates": 0, "memorized": 0}

    def start(self, documents: int) -> None:
        self.bar = tqdm(total=documents, unit="doc", desc="scan", dynamic_ncols=True)

    def __call__(self, stats: dict) -> None:
        self.totals["candidates"] += stats["candidates"]
        self.totals["memorized"] += stats["memorized"]
        if self.bar is None:
            return
        self.bar.update(stats["documents"])
        spans_per_s = stats["spans"] / stats["seconds"] if stats["seconds"] else 0.0
        self.bar.set_postfix(spans=stats["spans"], candidates=self.totals["candidates"],
                             memorized=self.totals["memorized"], spans_s=f"{spans_per_s:.1f}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def run_with_progress(config: ScanConfig, out: str, executor: ExecutorConfig | None = None,
                      passages: PassageConfig | None = None) -> dict:
    bar = ProgressBar()
    try:
        return run_scan(config, out, progress=bar, executor=executor, passages=passages)
    finally:
        bar.close()
