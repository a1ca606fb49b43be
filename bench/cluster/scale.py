"""Ray scaling on the CPU with the tiny model (1 vs 2 actors, and the local executor), then a cost model
for N GPUs on a 1,000-book collection built from measured per-span figures.

    python bench/cluster/scale.py [--workdir DIR] [--docs 24]

Every variant scans the same corpus with one torch thread per worker, so the ratio isolates the
executor. Ray start-up is timed apart from the scans (a cluster pays it once per job).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from scale_model import GPU_FIGURES, cost_table

from scanner.cli.demo import CPU_SEARCH
from scanner.config import (
    CorpusConfig,
    ExecutorConfig,
    ModelConfig,
    ScanConfig,
    ScreenConfig,
    SearchConfig,
    SpanConfig,
)
from scanner.run.driver import run_scan
from scanner.studies.tiny import build_tiny

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "screen"))  # bench/ is not a package
from scan import corpus  # noqa: E402  bench/screen/scan.py: the same planted corpus


def timed(config: ScanConfig, out: Path, executor: ExecutorConfig) -> dict:
    start = time.perf_counter()
    stats = run_scan(config, str(out), executor=executor)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "spans": stats["spans"], "spans_per_s": stats["spans"] / seconds,
            "candidates": stats["candidates"], "memorized": stats["memorized"], "screen_s": stats["screen_s"],
            "search_s": stats["search_s"], "run": stats["run"]}


def per_span_figures(out: Path) -> dict:
    """Measured means from a finished run: screen seconds per span, GCG steps per searched span."""
    import pyarrow.parquet as pq

    rows = pq.read_table(out / "results", columns=["status", "steps", "screen_s", "search_s"]).to_pylist()
    searched = [r for r in rows if r["status"] in ("memorized", "not_memorized")]
    memorized = [r for r in searched if r["status"] == "memorized"]
    return {"spans": len(rows), "searched": len(searched), "memorized": len(memorized),
            "screen_s_per_span": sum(r["screen_s"] for r in rows) / len(rows),
            "steps_per_memorized": sum(r["steps"] for r in memorized) / max(len(memorized), 1),
            "search_s_per_searched": sum(r["search_s"] for r in searched) / max(len(searched), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--docs", type=int, default=24)
    args = parser.parse_args()
    import ray

    work = Path(args.workdir or tempfile.mkdtemp(prefix="acr-bench-"))
    model = build_tiny(work)
    root = Path(tempfile.mkdtemp(prefix="acr-scale-"))
    path = corpus(root / "corpus.parquet", args.docs)
    base = ScanConfig(corpus=CorpusConfig(path=str(path)),
                      model=ModelConfig(model=str(model), device="cpu", threads=1),
                      spans=SpanConfig(span_tokens=12, stride=2), screen=ScreenConfig(context_tokens=16),
                      search=SearchConfig(**CPU_SEARCH.__dict__), min_match_rate=0.95, docs_per_shard=2)
    start = time.perf_counter()
    ray.init(address="local", num_cpus=2, include_dashboard=False, configure_logging=False)
    startup = time.perf_counter() - start
    results = {"ray_startup_s": startup}
    for name, executor in (("local_1_thread", ExecutorConfig()),
                           ("ray_1_actor", ExecutorConfig(kind="ray", num_actors=1)),
                           ("ray_2_actors", ExecutorConfig(kind="ray", num_actors=2))):
        results[name] = timed(base, root / name, executor)
        print(json.dumps({"bench": "scale", "variant": name, **results[name]}), flush=True)
    ray.shutdown()
    results["ratio_2_vs_1_actor"] = results["ray_1_actor"]["seconds"] / results["ray_2_actors"]["seconds"]
    results["ray_1_actor_vs_local"] = results["local_1_thread"]["seconds"] / results["ray_1_actor"]["seconds"]
    results["measured"] = per_span_figures(root / "local_1_thread")
    efficiency = results["ratio_2_vs_1_actor"] / 2
    print(json.dumps({"bench": "scale", **{k: v for k, v in results.items() if not isinstance(v, dict)},
                      "parallel_efficiency": efficiency, "measured": results["measured"]}), flush=True)
    print(cost_table(GPU_FIGURES, efficiency=min(efficiency, 1.0), gpus=(1, 8, 64, 256)))


if __name__ == "__main__":
    main()
