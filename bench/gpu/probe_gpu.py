"""Seconds of one GCG step's candidate scoring with and without a draft model (probe sampling), on
random-weight Llama shapes: the target scores all B candidates, or the draft scores all B and the
target a probe and the draft's best (search/gcg.py probe_scores, through the search driver's own
requests), side by side in one run.

    python bench/gpu/probe_gpu.py --target 8b --draft 1b --candidates 512                      # GPU
    python bench/gpu/probe_gpu.py --target tiny --draft tiny --device cpu --dtype float32 --candidates 64   # rehearsal

Random weights say nothing about agreement, so the filtered set is fixed at rho = 0, nanoGCG's
default rule ((1 - 1/2) * B / 8, with a probe of 16): the cost of a step when draft and target agree
no better than chance. What a real pair's agreement does is bench/search/probe_sampling.py's measure.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "search"))  # gcg_step; bench/ is not a package
from gcg_step import bare_engine, build, timed  # noqa: E402

from scanner.config import DraftConfig  # noqa: E402
from scanner.engine.batched import TargetScorer  # noqa: E402
from scanner.measures.probe import filtered_size  # noqa: E402


def step_seconds(scorer: TargetScorer, candidates: torch.Tensor, rule: DraftConfig | None, steps: int,
                 device: str) -> float:
    """One step's candidate scoring: all on the target, or the draft's forward, the probe's and the filtered set's."""
    if rule is None:
        return timed(lambda: scorer.score(candidates), steps, device)
    b = candidates.shape[0]
    kept = filtered_size(b, 0.0, rule.reduction, rule.min_kept)

    def drafted():
        losses = scorer.draft.score(candidates).loss
        scorer.score(candidates[:rule.probe_size])
        scorer.score(candidates[losses.argsort()[:kept]])

    return timed(drafted, steps, device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="8b")
    parser.add_argument("--draft", default="1b")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--candidates", type=int, default=512)
    parser.add_argument("--free", type=int, default=20, help="free prompt tokens")
    parser.add_argument("--target-tokens", type=int, default=64)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    big, small = build(args.target, args.device, dtype), build(args.draft, args.device, dtype)
    if big.config.vocab_size != small.config.vocab_size:
        raise SystemExit(f"--target {args.target} and --draft {args.draft} need one vocabulary")
    gen = torch.Generator().manual_seed(0)
    vocab = big.config.vocab_size
    target = torch.randint(3, vocab, (args.target_tokens,), generator=gen).tolist()
    candidates = torch.randint(3, vocab, (args.candidates, args.free), generator=gen)
    scorer = TargetScorer(bare_engine(big, args, dtype), target, "margin")
    scorer.draft = TargetScorer(bare_engine(small, args, dtype), target, "margin")
    rule = DraftConfig(model="random")
    off = step_seconds(scorer, candidates, None, args.steps, args.device)
    on = step_seconds(scorer, candidates, rule, args.steps, args.device)
    draft_only = timed(lambda: scorer.draft.score(candidates), args.steps, args.device)
    target_rows = rule.probe_size + filtered_size(args.candidates, 0.0, rule.reduction, rule.min_kept)
    print(json.dumps({"target": args.target, "draft": args.draft, "device": args.device, "dtype": args.dtype,
                      "candidates": args.candidates, "free": args.free, "target_tokens": args.target_tokens,
                      "target_rows_off": args.candidates, "target_rows_on": target_rows,
                      "score_s_off": round(off, 4), "score_s_on": round(on, 4), "draft_score_s": round(draft_only, 4),
                      "speedup": round(off / on, 2)}))


if __name__ == "__main__":
    main()
