"""`acr-scan demo`: the embedded default job. Trains the tiny model (about 20 s on 2 cores, cached),
measures the planted canaries and unseen controls with the fast schedule, then scans a small Parquet
corpus with the canaries hidden in unseen text and writes the report and the evidence export."""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from pathlib import Path

from scanner import api
from scanner.config import GCGConfig, ModelConfig, SearchConfig
from scanner.studies.tiny import CANARIES, TinySpec, build_tiny, salad

# Sized for a 2-core CPU and a 64-wide model: small batches are cheap, long runs are not.
CPU_SEARCH = SearchConfig(
    decide_steps=150, shrink_steps=80, restarts=1, gcg=GCGConfig(top_k=64, num_candidates=96, patience=40)
)


def default_workdir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "acr-scanner" / "tiny"


def random_string(rng: random.Random, length: int) -> str:
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    return "".join(rng.choice(alphabet) for _ in range(length))


def demo_targets(seed: int) -> list[dict]:
    rng = random.Random(1000 + seed)
    targets = [{"text": c, "group": "canary"} for c in CANARIES]
    targets += [{"text": salad(rng, 10), "group": "unseen text"} for _ in range(2)]
    targets.append({"text": random_string(rng, 24), "group": "random string"})
    return targets


def run_demo(*, workdir: str | None, seed: int, as_json: bool, echo: Callable[[str], None]) -> list[dict]:
    from scanner.cli.output import emit_records

    where = Path(workdir) if workdir else default_workdir()
    echo(f"training the tiny model in {where} (cached after the first run) ...")
    model_dir = build_tiny(where, TinySpec(seed=seed))
    targets = demo_targets(seed)
    search = SearchConfig(**{**CPU_SEARCH.__dict__, "seed": seed})
    records = api.measure(targets, ModelConfig(model=str(model_dir), device="cpu"), search=search)
    for record, target in zip(records, targets, strict=True):
        record["group"] = target["group"]
    emit_records(records, as_json)
    if not as_json:
        for group in dict.fromkeys(t["group"] for t in targets):
            hits = [r for r in records if r["group"] == group]
            echo(
                f"  {group}: {sum(r['memorized'] for r in hits)}/{len(hits)} memorized, "
                f"{sum(r['calibrated_memorized'] for r in hits)} calibrated memorized"
            )
        scan_demo(where, model_dir, seed, echo)
    return records


def scan_demo(where: Path, model_dir: Path, seed: int, echo: Callable[[str], None]) -> Path:
    """The main job in miniature: corpus -> run directory -> report and evidence export."""
    import shutil

    from scanner.cli.output import calibration_line, run_summary, summary_line, work_text_tokens
    from scanner.cli.pages import surroundings_of
    from scanner.config import CorpusConfig, ScanConfig, ScreenConfig, SpanConfig
    from scanner.results.export import export
    from scanner.results.report import write_report
    from scanner.stages.surroundings import CONTEXT_CHARS
    from scanner.storage.passages import read_passages
    from scanner.storage.rundir import RunDir

    root = where / "demo-scan"
    shutil.rmtree(root, ignore_errors=True)  # a demonstration starts clean; real runs resume instead
    corpus = demo_corpus(root / "corpus.parquet", seed)
    config = ScanConfig(
        corpus=CorpusConfig(path=str(corpus)),
        model=ModelConfig(model=str(model_dir), device="cpu"),
        spans=SpanConfig(span_tokens=12, stride=2),
        screen=ScreenConfig(context_tokens=16),
        search=SearchConfig(**{**CPU_SEARCH.__dict__, "seed": seed}),
        min_match_rate=0.95,
        docs_per_shard=3,
        audit_sample=0,
    )  # no recall audit: its draws of the demo's salad can flag unseen text
    echo("")
    echo(f"scanning the demo corpus {corpus} ...")
    result = api.scan(config, root / "run")
    run, table = RunDir(result.run_dir), result.table
    passages = read_passages(run)
    around = surroundings_of(run, table, passages, None, CONTEXT_CHARS)
    write_report(
        table, run_summary(run), root / "report.html", passages, around, work_text_tokens(run), run.recall()
    )
    count = export(table, root / "flagged.jsonl")
    echo(summary_line(result.stats, str(root / "run")))
    echo(f"{count} memorized spans with their prompts: {root / 'flagged.jsonl'}")
    echo(calibration_line(table))
    echo(f"report: {root / 'report.html'} (a page per passage in {root / 'report-passages'})")
    return root


def demo_corpus(path: str | Path, seed: int = 0) -> Path:
    """A small Parquet corpus: the canaries planted once each inside unseen word salad, plus
    documents of salad alone and one null document (a skipped row)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(2000 + seed)
    docs = [f"{salad(rng, 14)}\n{canary}\n{salad(rng, 10)}" for canary in CANARIES]
    docs += [salad(rng, 24) for _ in range(2)] + [None]
    table = pa.table({"id": [f"doc-{i}" for i in range(len(docs))], "text": docs})
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, out)
    return out
