"""The driver's progress bar: spans, candidates, memorized, spans per second, ETA (tqdm's)."""

from __future__ import annotations

from tqdm import tqdm

from scanner.config import ExecutorConfig, PassageConfig, ScanConfig
from scanner.run.driver import pending_shards, prepare_run, run_scan, validate
from scanner.stages.read import Corpus
from scanner.storage.lock import run_lock


def run_with_progress(config: ScanConfig, out: str, executor: ExecutorConfig | None = None,
                      passages: PassageConfig | None = None) -> dict:
    corpus = validate(config, out)  # before any folder is made or model loads
    with run_lock(out):  # before prepare, which deletes temp files a live writer owns
        return _with_bar(config, corpus, out, executor, passages)


def _with_bar(config: ScanConfig, corpus: Corpus, out: str, executor: ExecutorConfig | None,
              passages: PassageConfig | None) -> dict:
    _, run, plan = prepare_run(config, out, corpus)
    pending = pending_shards(run, plan)
    totals = {"candidates": 0, "memorized": 0}
    with tqdm(total=sum(s.num_docs for s in pending), unit="doc", desc="scan", dynamic_ncols=True) as bar:
        def advance(stats: dict) -> None:
            totals["candidates"] += stats["candidates"]
            totals["memorized"] += stats["memorized"]
            bar.update(stats["documents"])
            spans_per_s = stats["spans"] / stats["seconds"] if stats["seconds"] else 0.0
            bar.set_postfix(spans=stats["spans"], candidates=totals["candidates"],
                            memorized=totals["memorized"], spans_s=f"{spans_per_s:.1f}")
        return run_scan(config, out, progress=advance, executor=executor, corpus=corpus, passages=passages)
