"""Where one GCG step's time goes on a random-weight Llama shape: gradient, sampling, scoring timed
apart, then the top CUDA kernels of a scoring pass (torch.profiler).

    python bench/gpu/profile_step.py --shape 8b
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "search"))  # gcg_step; bench/ is not a package
from gcg_step import build  # noqa: E402

from scanner.config import GCGConfig  # noqa: E402
from scanner.engine.batched import TargetScorer  # noqa: E402
from scanner.engine.hf import HFEngine  # noqa: E402
from scanner.engine.loading import LoadedModel  # noqa: E402
from scanner.engine.template import PromptTemplate  # noqa: E402
from scanner.search.gcg import sample_candidates  # noqa: E402


def clock(fn, repeat: int = 3) -> float:
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / repeat


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", default="8b")
    parser.add_argument("--candidates", type=int, default=512)
    args = parser.parse_args()
    model = build(args.shape, "cuda", torch.bfloat16)
    vocab = model.config.vocab_size
    loaded = LoadedModel(model=model, tokenizer=None, device="cuda", dtype="bfloat16", source="random")
    engine = HFEngine.bare(loaded, PromptTemplate("", "", (1,), (1,), (), "BOS"), list(range(3, vocab)))
    gen = torch.Generator().manual_seed(0)
    target, prompt = torch.randint(3, vocab, (64,), generator=gen), torch.randint(3, vocab, (20,), generator=gen)
    scorer = TargetScorer(engine, target.tolist(), "ce")
    config = GCGConfig(top_k=256, num_candidates=args.candidates, loss="ce")
    grad = scorer.gradient(prompt.cuda())[0].cpu()
    cands = sample_candidates(prompt, grad, config, gen)[: args.candidates].cuda()
    seqs = scorer.sequences(cands)
    parts = {
        "gradient": clock(lambda: scorer.gradient(prompt.cuda())),
        "sample": clock(lambda: sample_candidates(prompt, scorer.gradient(prompt.cuda())[0].cpu(), config, gen))
        - clock(lambda: scorer.gradient(prompt.cuda())),
        "score": clock(lambda: scorer.score(cands)),
        "forward_only": clock(lambda: engine.logits(seqs, keep=65)),
        "body_only": clock(lambda: model.model(input_ids=seqs, use_cache=False)),
    }
    print(json.dumps({"bench": "profile_step", "shape": args.shape, **parts}), flush=True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        scorer.score(cands)
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=18, max_name_column_width=60))


if __name__ == "__main__":
    main()
