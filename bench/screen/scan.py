"""Scan throughput on the CPU with the tiny model: screening alone and end to end, one run.

    python bench/screen/scan.py [--workdir DIR] [--docs 40]

Screening alone: --max-candidates-per-doc 0 (every span is screened, none searched). End to end: the
demo's settings (12-token spans every 2 tokens, strict screen, CPU-sized GCG). Figures: spans/s and
screened tokens/s (window rows: context + span tokens through the model).
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from scanner.cli.demo import CPU_SEARCH
from scanner.config import CorpusConfig, ModelConfig, ScanConfig, ScreenConfig, SearchConfig, SpanConfig
from scanner.run.driver import run_scan
from scanner.studies.tiny import CANARIES, build_tiny, salad


def corpus(path: Path, docs: int) -> Path:
    rng = random.Random(11)
    texts = [f"{salad(rng, 20)}\n{CANARIES[i % len(CANARIES)]}\n{salad(rng, 20)}" if i % 2 == 0 else salad(rng, 50)
             for i in range(docs)]
    pq.write_table(pa.table({"id": [f"d{i}" for i in range(docs)], "text": texts}), path)
    return path


def timed_scan(config: ScanConfig, out: Path) -> tuple[dict, float]:
    start = time.perf_counter()
    stats = run_scan(config, str(out))
    return stats, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--docs", type=int, default=40)
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="acr-bench-"))
    model = build_tiny(work)
    root = Path(tempfile.mkdtemp(prefix="acr-scan-bench-"))
    path = corpus(root / "corpus.parquet", args.docs)
    base = ScanConfig(corpus=CorpusConfig(path=str(path)), model=ModelConfig(model=str(model), device="cpu"),
                      spans=SpanConfig(span_tokens=12, stride=2), screen=ScreenConfig(context_tokens=16),
                      search=SearchConfig(**CPU_SEARCH.__dict__), min_match_rate=0.95, docs_per_shard=8)
    for name, config in (("screen_only", replace(base, max_candidates_per_doc=0)), ("end_to_end", base)):
        stats, seconds = timed_scan(config, root / name)
        tokens = stats["spans"] * (config.screen.context_tokens + config.spans.span_tokens)
        print(json.dumps({"bench": "scan", "variant": name, "docs": args.docs, "spans": stats["spans"],
                          "seconds_incl_model_load": seconds, "spans_per_s": stats["spans"] / seconds,
                          "screen_window_tokens_per_s": tokens / seconds,
                          "status_counts": stats["status_counts"]}), flush=True)


if __name__ == "__main__":
    main()
