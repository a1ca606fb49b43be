"""`acr-scan demo`: the embedded default job. Trains the tiny model (about a minute on 2 cores, cached),
then measures the planted canaries and unseen controls with the fast schedule."""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from pathlib import Path

from scanner.config import GCGConfig, ModelConfig, PromptConfig, SearchConfig
from scanner.tiny import CANARIES, TinySpec, build_tiny, salad

# Sized for a 2-core CPU and a 64-wide model: small batches are cheap, long runs are not.
CPU_SEARCH = SearchConfig(decide_steps=150, shrink_steps=80, restarts=1,
                          gcg=GCGConfig(top_k=64, num_candidates=96, patience=40))


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
    from scanner.cli import emit_records
    from scanner.measure import measure_many

    where = Path(workdir) if workdir else default_workdir()
    echo(f"training the tiny model in {where} (cached after the first run) ...")
    model_dir = build_tiny(where, TinySpec(seed=seed))
    targets = demo_targets(seed)
    search = SearchConfig(**{**CPU_SEARCH.__dict__, "seed": seed})
    records = list(measure_many(ModelConfig(model=str(model_dir), device="cpu"), PromptConfig(), search, targets))
    for record, target in zip(records, targets, strict=True):
        record["group"] = target["group"]
    emit_records(records, as_json)
    if not as_json:
        for group in dict.fromkeys(t["group"] for t in targets):
            hits = [r for r in records if r["group"] == group]
            echo(f"  {group}: {sum(r['memorized'] for r in hits)}/{len(hits)} memorized")
    return records
