"""The scan driver's peak memory at library scale: a screen output of --books x --spans-per-book rows
(1,000 books x 3,700 spans: 3.7M spans, a 1,000-book corpus of 64-token windows) written directly, no
model forward, then the driver's phases after the screen run for real on the tiny model: the plans,
the search (--max-candidates), the recall audit's draw over every unsearched span and the results.

    python bench/cluster/driver_memory.py --books 1000 --spans-per-book 3700 --candidate-share 0.05

The screen is replaced by `synthetic_screen` (rows of the real schema: random target ids of
--span-tokens tokens, random greedy-match rates and NLLs, --candidate-share of them candidates), so the
screen's own memory (one shard's rows at a time, bench/screen/screen_memory.py) stays out and what is measured
is what the driver holds across shards. The documents' texts are short stand-ins (assumed, not a book's
370 KB): the driver reads them only to find the copies of memorized spans, one shard at a time, and the
audit finds none in random targets. Prints one JSON line: the peak RSS (MiB) of the whole process (the
in-process worker's tiny model included), the RSS once the screen was written, seconds per phase.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from scanner.results.rows import default_row
from scanner.schema.results import results_schema
from scanner.studies.tiny import build_tiny

SCREEN_RSS: list[float] = []


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def rss_mib() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def synthetic_rows(shard: int, docs, spans: int, tokens: int, share: float, vocab: int, meta) -> pa.Table:
    """One shard's screen rows: `spans` windows per document, `share` of them candidates (not_searched)."""
    rng = np.random.default_rng(shard)
    n = len(docs) * spans
    doc = np.repeat(np.arange(len(docs)), spans)
    start = np.tile(np.arange(spans) * tokens, len(docs))
    ids = rng.integers(3, vocab, n * tokens, dtype=np.int64)
    target = pa.ListArray.from_arrays(pa.array(np.arange(0, n * tokens + 1, tokens, dtype=np.int32)), pa.array(ids))
    candidate = rng.random(n) < share
    columns = {
        "doc_id": pa.array([docs[i].doc_id for i in doc]), "doc_row": pa.array([docs[i].row for i in doc]),
        "span_id": pa.array([f"{shard:06x}{i:010x}" for i in range(n)]), "shard": pa.array(np.full(n, shard)),
        "token_start": pa.array(start), "token_end": pa.array(start + tokens),
        "char_start": pa.array(start * 4), "char_end": pa.array((start + tokens) * 4),
        "text": pa.array(["w" * (tokens * 4)] * n), "target_ids": target, "target_tokens": pa.array(np.full(n, tokens)),
        "status": pa.array(np.where(candidate, "not_searched", "screened_out")),
        "greedy_match_rate": pa.array(rng.random(n)), "mean_nll": pa.array(rng.random(n) * 5),
        "tau": pa.array(np.ones(n)), "screen_s": pa.array(np.zeros(n)),
    }
    schema = results_schema()
    default = default_row()
    arrays = [columns[f.name].cast(f.type) if f.name in columns else constant(default.get(f.name), f.type, n)
              for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema).replace_schema_metadata(meta)


def constant(value, kind: pa.DataType, n: int) -> pa.Array:
    return pa.nulls(n, kind) if value is None else pa.repeat(pa.scalar(value, type=kind), n)


def patch_screen(spans: int, tokens: int, share: float) -> None:
    """The worker's screen replaced by synthetic rows (run/tasks.py calls run.shard.screen_shard)."""
    import scanner.run.tasks as tasks

    def screen(engine, shard, docs, config, meta):
        table = synthetic_rows(shard.shard, docs, spans, tokens, share, len(engine.tokenizer), meta)
        statuses = counts(table.column("status"))
        SCREEN_RSS.append(rss_mib())
        return table, {"documents": len(docs), "spans": table.num_rows, "rows": table.num_rows,
                       "status_counts": statuses, "candidates": statuses.get("not_searched", 0), "memorized": 0,
                       "seconds": 0.0, "screen_s": 0.0, "tokens": table.num_rows * tokens}
    tasks.screen_shard = screen


def counts(column) -> dict[str, int]:
    values, n = np.unique(column.to_numpy(zero_copy_only=False), return_counts=True)
    return {str(k): int(v) for k, v in zip(values, n, strict=True)}


def corpus(path: Path, books: int) -> None:
    texts = [f"book {i}: " + "a stand-in for the book's text, which the driver reads only to find copies. " * 4
             for i in range(books)]
    pq.write_table(pa.table({"id": [f"b{i:05d}" for i in range(books)], "text": texts}), path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--books", type=int, default=1000)
    parser.add_argument("--spans-per-book", type=int, default=3700)
    parser.add_argument("--span-tokens", type=int, default=64)
    parser.add_argument("--candidate-share", type=float, default=0.05)
    parser.add_argument("--tiny", default=os.environ.get("ACR_TINY_DIR"), help="the tiny model's folder (built if absent)")
    parser.add_argument("--work", help="folder for the corpus and the run (default: a temporary one)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    work = Path(args.work or tempfile.mkdtemp(prefix="driver-memory-"))
    work.mkdir(parents=True, exist_ok=True)
    tiny = build_tiny(args.tiny or work / "tiny")
    corpus(work / "corpus.parquet", args.books)
    patch_screen(args.spans_per_book, args.span_tokens, args.candidate_share)
    from scanner.cli.main import cli

    start = time.perf_counter()
    before = rss_mib()
    cli.main(args=["scan", str(work / "corpus.parquet"), "--model", str(tiny), "--out", str(work / "run"),
                   "--max-candidates", "8", "--audit-sample", "8", "--steps", "2", "--candidates", "16", "--top-k", "16",
                   "--restarts", "0", "--calibration-prompts", "0",
                   "--threads", "1"], standalone_mode=False)
    results = pq.ParquetDataset(work / "run" / "results").read(columns=["status"])
    print(json.dumps({"books": args.books, "spans": results.num_rows, "candidate_share": args.candidate_share,
                      "peak_rss_mib": round(peak_mib()), "rss_start_mib": round(before),
                      "rss_after_screen_mib": round(max(SCREEN_RSS, default=0)),
                      "seconds": round(time.perf_counter() - start, 1),
                      "statuses": counts(results.column("status"))}))


if __name__ == "__main__":
    main()
