"""The driver's progress bar: documents screened, spans and candidates so far, spans per second, ETA
(tqdm's); once the scan returns, the run's own totals, memorized spans included (the bar advances with
the screen, before any verdict, so it shows no memorized count until then)."""

from __future__ import annotations

from tqdm import tqdm

from scanner.config import ExecutorConfig, PassageConfig, ScanConfig
from scanner.run.driver import run_scan


class ProgressBar:
    """`run_scan`'s progress: `start(documents)` once the run directory is prepared, then one call
    per screened shard."""

    def __init__(self) -> None:
        self.bar: tqdm | None = None
        self.totals = {"spans": 0, "candidates": 0}

    def start(self, documents: int) -> None:
        self.bar = tqdm(total=documents, unit="doc", desc="scan", dynamic_ncols=True)

    def __call__(self, stats: dict) -> None:
        # Screen stats: what this relaunch screened, shard by shard (a screen finds no memorized span).
        self.totals["spans"] += stats["spans"]
        self.totals["candidates"] += stats["candidates"]
        if self.bar is None:
            return
        self.bar.update(stats["documents"])
        spans_per_s = stats["spans"] / stats["seconds"] if stats["seconds"] else 0.0
        self.bar.set_postfix(spans=self.totals["spans"], candidates=self.totals["candidates"],
                             spans_s=f"{spans_per_s:.1f}")

    def finish(self, stats: dict) -> None:
        """The run's totals once it returned (its merged stats: every shard, resumed ones too)."""
        if self.bar is not None:
            self.bar.set_postfix(spans=stats.get("spans", 0), candidates=stats.get("candidates", 0),
                                 memorized=stats.get("memorized", 0))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def run_with_progress(config: ScanConfig, out: str, executor: ExecutorConfig | None = None,
                      passages: PassageConfig | None = None) -> dict:
    bar = ProgressBar()
    try:
        stats = run_scan(config, out, progress=bar, executor=executor, passages=passages)
        bar.finish(stats)
        return stats
    finally:
        bar.close()
