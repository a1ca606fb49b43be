"""Validity study: ACR against duplication count and model size, on models trained here.

    python bench/validity/validity.py                   # CPU: two small Llamas, counts 1/4/16/64 (5 min, 2 idle cores)
    python bench/validity/validity.py --size gpu --device cuda   # H200: ~20M and ~100M parameters, counts 1..64 (unmeasured)

Builds a corpus of real text (stdlib docstrings, installed distributions' METADATA and licenses),
plants canary passages at each duplication count, trains every model size on it, then measures with
acr-scan's library: every canary, held-out passages, random token strings and predictable text (counting
and a refrain: the corpus holds counting runs and refrains, never these) with the fast schedule, a subset
with the paper schedule, and the natural continuation test (the target's first tokens -> greedy rest)
alongside. Memorized targets are calibrated (scanner/measures/calibration.py): self-calibration, and a reference
model of the smallest size trained on the same corpus without the canaries. Writes rows.jsonl,
summary.json, table.md and validity.png to --out.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from dataclasses import asdict, replace
from pathlib import Path

from scanner.cli.demo import default_workdir
from scanner.config import CalibrationConfig, GCGConfig, ModelConfig, PromptConfig, SearchConfig
from scanner.engine.hf import HFEngine
from scanner.engine.loading import load_model
from scanner.studies.validity import (
    CorpusSpec,
    ModelSize,
    build_corpus,
    measure_target,
    parameters,
    study_targets,
    summarize,
    train_models,
)

log = logging.getLogger("validity")

# Each size: (corpus, tokenizer vocabulary, models, epochs over the corpus, fast search, paper search,
# paper subset: the canary counts measured with the paper schedule too, natural-prefix length).
SIZES = {
    "cpu": {
        "corpus": CorpusSpec(counts=(1, 4, 16, 64), canaries_per_count=3, heldout=3, max_chars=150_000,
                             predictable=60),
        "vocab": 2048, "epochs": 10, "random_controls": 3, "prefix_tokens": 8,
        "models": [ModelSize(name="2x64", hidden=64, layers=2, heads=4, batch=8, lr=6e-3),
                   ModelSize(name="4x128", hidden=128, layers=4, heads=4, batch=8, lr=6e-3)],
        # The demo's CPU-sized GCG, one attempt at the decision length: an unmemorized 35-token target
        # then costs 60 steps instead of 300.
        "fast": SearchConfig(decide_steps=60, shrink_steps=60, restarts=0,
                             gcg=GCGConfig(top_k=64, num_candidates=64, patience=30)),
        # The authors' GCG and schedule, with 60 instead of 200 steps at 5 tokens and the cap at |y|
        # (a prompt of |y| tokens or more can never show memorization), or the walk 5, 10, ... 5|y|
        # on one unmemorized canary alone takes most of an hour on 2 cores.
        "paper": SearchConfig.paper(paper_steps=60, cap_factor=1),
        # Memorized canaries only: on an unmemorized one the paper walk (5, 10, ... up to |y|, x1.2
        # steps each time) alone takes longer than the whole CPU budget.
        "paper_counts": (64,),
        "paper_per_count": 3,
    },
    "gpu": {
        "corpus": CorpusSpec(counts=(1, 2, 4, 8, 16, 32, 64), canaries_per_count=3, heldout=5,
                             max_chars=6_000_000, stdlib_packages=True, predictable=600),
        "vocab": 8192, "epochs": 4, "random_controls": 5, "prefix_tokens": 8,
        "models": [ModelSize(name="20M", hidden=384, layers=8, heads=6, batch=32, lr=1e-3,
                             train_context=256),
                   ModelSize(name="100M", hidden=768, layers=10, heads=12, batch=32, lr=6e-4,
                             train_context=256)],
        # Budget estimate (unmeasured): ~1.5M tokens x 4 epochs, about 20 s and 80 s of training; 31
        # targets a model, ~20 of them unmemorized at ~8 s each (150 steps of 256 candidates).
        "fast": SearchConfig(decide_steps=150, shrink_steps=100, restarts=0),
        "paper": SearchConfig.paper(cap_factor=1),
        "paper_counts": (1, 64),
        "paper_per_count": 1,  # the paper walk on one unmemorized canary is ~1,500 GCG steps
    },
}


def train(setup: dict, corpus_spec: CorpusSpec, corpus, workdir: Path, device: str) -> tuple[dict[str, Path], dict]:
    """Train every size, or reuse the models of an earlier run with the same settings (study.json)."""
    key = json.dumps({"corpus": asdict(corpus_spec), "vocab": setup["vocab"], "epochs": setup["epochs"],
                      "models": [asdict(s) for s in setup["models"]]}, sort_keys=True)
    marker, start = workdir / "study.json", time.perf_counter()
    if marker.is_file() and json.loads(marker.read_text())["key"] == key:
        info = json.loads(marker.read_text())["info"]
        log.info("reusing the models trained in %s", workdir)
    else:
        sizes = train_models(corpus, setup["models"], setup["vocab"], setup["epochs"], workdir, device)
        # The reference: the smallest size on the same corpus without the canaries (it never saw them).
        reference = replace(setup["models"][0], name="reference")
        train_models(replace(corpus, documents=corpus.background), [reference], setup["vocab"], setup["epochs"],
                     workdir, device)
        info = {"train_s": round(time.perf_counter() - start, 1), "epochs": setup["epochs"],
                "models": {n: {**asdict(s), "parameters": parameters(workdir / n)} for n, s in sizes.items()}}
        marker.write_text(json.dumps({"key": key, "info": info}))
    return {name: workdir / name for name in info["models"]}, info


def measure_model(name: str, model_dir: Path, corpus, setup: dict, device: str, seed: int) -> list[dict]:
    engine = HFEngine(load_model(ModelConfig(model=str(model_dir), device=device)), PromptConfig())
    ref_dir = model_dir.parent / "reference"
    reference = HFEngine(load_model(ModelConfig(model=str(ref_dir), device=device)), PromptConfig())
    calibration = CalibrationConfig(reference_model=str(ref_dir), seed=seed)
    targets = study_targets(corpus, engine, setup["random_controls"], seed)
    rows, papers = [], {}
    for target in targets:
        jobs = [setup["fast"]]
        count = target["count"]
        if target["group"] == "canary" and count in setup["paper_counts"] and papers.get(count, 0) < setup["paper_per_count"]:
            papers[count] = papers.get(count, 0) + 1
            jobs.append(setup["paper"])
        for config in jobs:
            row = {"model": name, **measure_target(engine, target, config, setup["prefix_tokens"], calibration,
                                                   reference)}
            log.info("%s %s %s x%d: ACR %.2f memorized %s natural %s (%.1fs)", name, row["schedule"],
                     row["group"], row["count"], row["acr"], row["memorized"], row["natural"], row["wall_s"])
            rows.append(row)
    return rows


def table(summary: list[dict]) -> str:
    lines = ["| model | schedule | group | duplicates | n | avg ACR | memorized | calibrated memorized | "
             "natural continuation | longest copy in prompt |", "|---|---|---|---|---|---|---|---|---|---|"]
    for s in summary:
        lines.append(f"| {s['model']} | {s['schedule']} | {s['group']} | {s['count'] or '-'} | {s['n']} | "
                     f"{s['avg_acr']:.2f} | {s['memorized']:.2f} | {s['calibrated']:.2f} | {s['natural']:.2f} | "
                     f"{s['max_copied']} |")
    return "\n".join(lines)


def plot(summary: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, label in ((axes[0], "avg_acr", "average ACR"), (axes[1], "memorized", "memorized share (ACR > 1)")):
        for i, model in enumerate(dict.fromkeys(s["model"] for s in summary)):
            rows = [s for s in summary if s["model"] == model and s["schedule"] == "fast"]
            canaries = [s for s in rows if s["group"] == "canary"]
            line = ax.plot([s["count"] for s in canaries], [s[key] for s in canaries], "o-", label=f"{model} canaries")
            for s, marker, x in ((next((r for r in rows if r["group"] == "held-out"), None), "s", 0.45),
                                 (next((r for r in rows if r["group"] == "random"), None), "x", 0.65)):
                if s is not None:  # controls were seen 0 times: drawn at the left edge
                    ax.plot([x * (1.08 ** i)], [s[key]], marker, color=line[0].get_color(), label=f"{model} {s['group']}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("duplication count in training (controls at the left: never seen)")
        ax.set_ylabel(label)
        ax.axhline(1.0 if key == "avg_acr" else 0.0, color="grey", lw=0.5, ls="--")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=sorted(SIZES), default="cpu")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (1 is faster on a busy machine)")
    parser.add_argument("--workdir", default=None,
                        help="trained models go here (default: the cache, beside the demo's tiny model)")
    parser.add_argument("--out", default=None, help="results folder (default bench/validity-<size>)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    setup, start = SIZES[args.size], time.perf_counter()
    out = Path(args.out or Path(__file__).parent / f"validity-{args.size}")
    out.mkdir(parents=True, exist_ok=True)
    corpus_spec = replace(setup["corpus"], seed=args.seed)
    corpus = build_corpus(corpus_spec)
    workdir = Path(args.workdir) if args.workdir else default_workdir().parent / f"validity-{args.size}"
    dirs, info = train(setup, corpus_spec, corpus, workdir, args.device)
    rows = [r for name, path in dirs.items() for r in measure_model(name, path, corpus, setup, args.device, args.seed)]
    summary = summarize(rows)
    (out / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    info.update(size=args.size, documents=len(corpus.documents), chars=corpus.chars,
                wall_s=round(time.perf_counter() - start, 1), summary=summary)
    (out / "summary.json").write_text(json.dumps(info, indent=1))
    (out / "table.md").write_text(table(summary) + "\n")
    plot(summary, out / "validity.png")
    print(table(summary))
    print(json.dumps({k: v for k, v in info.items() if k != "summary"}))


if __name__ == "__main__":
    main()
