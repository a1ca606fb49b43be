"""Which GCG loss finds shorter prompts: success rate and steps of GCG at short fixed lengths.

    python bench/search/losses.py [--workdir DIR] [--seeds 3] [--steps 100]

For each target and prompt length n, GCG runs from the same random start (per seed) with each loss and
the same budget; a loss that succeeds more often at small n finds shorter prompts in MiniPrompt.
Targets: the tiny model's canaries at n = 1, 2 (the shortest prompts that exist), and perturbed
canaries (one word swapped, so the model must be pushed off its memorized path) at n = 3, 6.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import replace

import torch

from scanner.cli.demo import CPU_SEARCH
from scanner.config import ModelConfig, PromptConfig
from scanner.engine.batched import TargetScorer
from scanner.engine.hf import HFEngine
from scanner.engine.loading import load_model
from scanner.search.driver import run_one
from scanner.search.gcg import run_gcg
from scanner.search.miniprompt import random_prompt
from scanner.studies.tiny import CANARIES, build_tiny

LOSSES = ("margin", "ce", "wrong_ce")


def cases() -> list[tuple[str, str, int]]:
    rows = [("canary", c, n) for c in CANARIES for n in (1, 2)]
    swaps = [("worst", "best"), ("happy", "quiet"), ("sea", "town"), ("lazy", "red")]
    for canary, (old, new) in zip(CANARIES, swaps, strict=True):
        rows += [("perturbed", canary.replace(old, new, 1), n) for n in (3, 6)]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    model_dir = build_tiny(args.workdir or tempfile.mkdtemp(prefix="acr-bench-"))
    engine = HFEngine(load_model(ModelConfig(model=str(model_dir), device="cpu")), PromptConfig())
    totals = {loss: {"runs": 0, "successes": 0, "steps_to_success": 0, "seconds": 0.0} for loss in LOSSES}
    for group, text, n in cases():
        ids = engine.encode_target(text)
        for seed in range(args.seeds):
            init = random_prompt(engine, n, torch.Generator().manual_seed(seed))
            for loss in LOSSES:
                gcg = replace(CPU_SEARCH.gcg, loss=loss, patience=None)
                start = time.perf_counter()
                out = run_one(engine, run_gcg(TargetScorer(engine, ids, loss), init, args.steps, gcg,
                                              torch.Generator().manual_seed(seed), 4)).value
                t = totals[loss]
                t["runs"] += 1
                t["seconds"] += time.perf_counter() - start
                if out.success is not None:
                    t["successes"] += 1
                    t["steps_to_success"] += out.steps
                print(json.dumps({"bench": "loss_case", "group": group, "n": n, "seed": seed, "loss": loss,
                                  "success": out.success is not None, "steps": out.steps}), flush=True)
    for loss, t in totals.items():
        mean = t["steps_to_success"] / t["successes"] if t["successes"] else None
        print(json.dumps({"bench": "losses", "loss": loss, **t, "mean_steps_to_success": mean}), flush=True)


if __name__ == "__main__":
    main()
