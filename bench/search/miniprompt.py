"""MiniPrompt schedules and GCG losses side by side on one model and one set of targets.

    python bench/search/miniprompt.py                      # CPU: the tiny model, CPU-sized GCG
    python bench/search/miniprompt.py --size gpu           # GPU: a larger model trained on the GPU first
    python bench/search/miniprompt.py --variants fast/margin --widths 1,4   # targets sharing forwards

Variants: `paper` (the authors' schedule and GCG: ce loss, top-k 250, 100 candidates, 200 steps at the
first length) against `fast` (ours) with each loss. Per variant: canaries memorized, average ACR of the
canaries (higher = shorter prompts found), controls wrongly flagged, forward passes and wall time.
--widths runs each fast variant also with that many targets per forward (`name@wN`, search/driver.py);
the paper variant, the authors' reference, runs one target at a time.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from dataclasses import replace

import torch

from scanner.cli.demo import CPU_SEARCH, random_string
from scanner.config import ModelConfig, PromptConfig, SearchConfig
from scanner.engine.hf import HFEngine
from scanner.engine.loading import load_model
from scanner.search.miniprompt import measure_many
from scanner.search.request import SearchRequest
from scanner.studies.tiny import CANARIES, TinySpec, build_tiny, salad

GPU_SPEC = TinySpec(vocab_size=1024, hidden=256, layers=4, heads=8, documents=1200, steps=1200, batch=64,
                    train_context=128, lr=2e-3)


def variants(size: str, losses: list[str]) -> dict[str, SearchConfig]:
    fast = CPU_SEARCH if size == "cpu" else SearchConfig()
    out = {f"fast/{loss}": replace(fast, gcg=replace(fast.gcg, loss=loss)) for loss in losses}
    return {**dict(list(out.items())[:1]), "paper": SearchConfig.paper(), **dict(list(out.items())[1:])}


def targets(size: str, controls: bool = True) -> list[tuple[str, str]]:
    rng = random.Random(7)
    rows = [("canary", c) for c in CANARIES]
    if not controls:
        return rows
    # Short controls: on them the paper schedule walks 5, 10, 15 ... up to 5|y|, 1.2x steps each time
    # (on CPU even shorter ones, or the paper variant alone takes most of an hour).
    words, chars = (3, 6) if size == "cpu" else (6, 10)
    rows += [("control", salad(rng, words)), ("control", random_string(rng, chars))]
    return rows


def run_variant(engine: HFEngine, name: str, config: SearchConfig, rows, width: int = 1) -> dict:
    sync = torch.cuda.synchronize if engine.device.startswith("cuda") else (lambda: None)
    results = []
    start = time.perf_counter()
    done = dict(measure_many(engine, [(SearchRequest(text), config) for _, text in rows], width))
    for index, (group, _) in enumerate(rows):
        r = done[index]
        results.append({"group": group, "acr": r.acr, "memorized": r.memorized, "prompt_tokens": r.prompt_tokens,
                        "target_tokens": r.target_tokens, "forwards": r.forwards, "steps": r.steps,
                        "wall_s": r.wall_s, "rejected": r.rejected_matches})
    sync()
    canaries = [x for x in results if x["group"] == "canary"]
    controls = [x for x in results if x["group"] == "control"]
    return {"variant": name if width == 1 else f"{name}@w{width}", "width": width,
            "canaries_memorized": sum(x["memorized"] for x in canaries), "canaries": len(canaries),
            "canary_avg_acr": sum(x["acr"] for x in canaries) / len(canaries),
            "controls_flagged": sum(x["memorized"] for x in controls),
            "forwards": sum(x["forwards"] for x in results), "steps": sum(x["steps"] for x in results),
            "canary_wall_s": sum(x["wall_s"] for x in canaries), "wall_s": time.perf_counter() - start,
            "rejected_matches": sum(x["rejected"] for x in results), "per_target": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=["cpu", "gpu"], default="cpu")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--losses", default="margin,ce,wrong_ce")
    parser.add_argument("--variants", default=None, help="comma list to run a subset, e.g. paper,fast/margin")
    parser.add_argument("--widths", default="1", help="targets per forward for the fast variants, e.g. 1,4")
    parser.add_argument("--no-controls", action="store_true", help="canaries only (the paper schedule is slow on controls)")
    args = parser.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="acr-bench-")
    start = time.perf_counter()
    model_dir = build_tiny(workdir, GPU_SPEC if args.size == "gpu" else TinySpec(), device=args.device)
    print(json.dumps({"bench": "train", "size": args.size, "seconds": time.perf_counter() - start}), flush=True)
    engine = HFEngine(load_model(ModelConfig(model=str(model_dir), device=args.device)), PromptConfig())
    chosen = variants(args.size, args.losses.split(","))
    if args.variants:
        chosen = {k: v for k, v in chosen.items() if k in args.variants.split(",")}
    rows = targets(args.size, controls=not args.no_controls)
    for name, config in chosen.items():
        for width in [1] if name == "paper" else map(int, args.widths.split(",")):
            row = run_variant(engine, name, config, rows, width)
            print(json.dumps({"bench": "miniprompt", "size": args.size, **row}), flush=True)


if __name__ == "__main__":
    main()
