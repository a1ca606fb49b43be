"""Seconds per GCG step on random-weight Llama shapes: ours vs a plain-HF (nanoGCG-style) step, side by
side in one run, against the measured bf16 matmul floor of the same GPU.

    python bench/search/gcg_step.py --shapes 1b,8b --candidates 512 --free 20 --target 64     # GPU
    python bench/search/gcg_step.py --shapes tiny --device cpu --dtype float32               # smoke test
    python bench/search/gcg_step.py --shapes none --widths 1,2,4,8 --width-shapes 135m,360m  # targets per forward

Plain HF: candidates as inputs_embeds, logits at every position, fp32 cross-entropy on the target
slice, one chunk, gc.collect() + empty_cache() after it (as nanoGCG does). Ours: input ids, LM head on
the target positions only (logits_to_keep), chunks sized from free memory, no garbage collection.

--widths: one GCG step (gradient, top-k sampling, candidate scores) of 8 targets, run `width` targets
per forward (engine/batched.py, as search/driver.py runs them), in seconds per target-step.
"""

from __future__ import annotations

import argparse
import gc
import json
import time

import torch
import torch.nn.functional as F

from scanner.config import GCGConfig
from scanner.engine import batched
from scanner.engine.batched import TargetScorer
from scanner.engine.hf import HFEngine
from scanner.engine.loading import LoadedModel
from scanner.engine.template import PromptTemplate
from scanner.search.gcg import sample_candidates

# SmolLM2's config beyond the body (a tied head, its rope base, 8k positions): no FLOPs change, but the
# model built is the real one's shape
SMOLLM2 = dict(vocab_size=49152, max_position_embeddings=8192, rope_theta=100000.0, tie_word_embeddings=True)
SHAPES = {
    "tiny": dict(hidden_size=64, num_hidden_layers=2, intermediate_size=256, num_attention_heads=4,
                 num_key_value_heads=4, vocab_size=512),
    # a small body under SmolLM2's 49k vocabulary: the head is most of the work, as in the screen's reports
    "28m": dict(hidden_size=256, num_hidden_layers=6, intermediate_size=1024, num_attention_heads=4,
                num_key_value_heads=4, vocab_size=49152),
    "135m": dict(hidden_size=576, num_hidden_layers=30, intermediate_size=1536, num_attention_heads=9,
                 num_key_value_heads=3, **SMOLLM2),  # SmolLM2-135M
    "360m": dict(hidden_size=960, num_hidden_layers=32, intermediate_size=2560, num_attention_heads=15,
                 num_key_value_heads=5, **SMOLLM2),  # SmolLM2-360M
    "1b": dict(hidden_size=2048, num_hidden_layers=16, intermediate_size=8192, num_attention_heads=32,
               num_key_value_heads=8, vocab_size=128256),
    "8b": dict(hidden_size=4096, num_hidden_layers=32, intermediate_size=14336, num_attention_heads=32,
               num_key_value_heads=8, vocab_size=128256),
}


def build(shape: str, device: str, dtype: torch.dtype):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**{"max_position_embeddings": 4096, "tie_word_embeddings": False, **SHAPES[shape]})
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = LlamaForCausalLM(config)  # random weights, real shapes
    finally:
        torch.set_default_dtype(previous)
    return model.eval().requires_grad_(False)


def useful_flops(model, batch: int, length: int, target: int) -> float:
    """Matmul FLOPs one step needs: body on every token, LM head on the target positions only,
    attention scores and values, and the gradient pass (forward + 2x backward of one sequence)."""
    c = model.config
    body = sum(p.numel() for n, p in model.named_parameters() if "embed" not in n and "lm_head" not in n)
    per_seq = 2 * body * length + 2 * c.hidden_size * c.vocab_size * target
    per_seq += 4 * c.num_hidden_layers * length * length * c.hidden_size
    return per_seq * (batch + 3)


def plain_hf_losses(model, candidates, prefix, target) -> torch.Tensor:
    weight = model.get_input_embeddings().weight
    b = candidates.shape[0]
    seqs = torch.cat([prefix.expand(b, -1), candidates, target.expand(b, -1)], dim=1)
    logits = model(inputs_embeds=weight[seqs]).logits
    start = prefix.numel() + candidates.shape[1] - 1
    shift = logits[:, start:start + target.numel()].float()
    loss = F.cross_entropy(shift.transpose(1, 2), target.expand(b, -1), reduction="none").mean(-1)
    del logits
    gc.collect()
    torch.cuda.empty_cache() if torch.cuda.is_available() else None
    return loss


def timed(fn, steps: int, device: str) -> float:
    fn()
    fn()  # warm-up: kernels, allocator
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    sync()
    start = time.perf_counter()
    for _ in range(steps):
        fn()
    sync()
    return (time.perf_counter() - start) / steps


def matmul_floor(device: str, dtype: torch.dtype) -> float:
    """TFLOP/s of a large square bf16 matmul: what this GPU really sustains."""
    n = 8192 if device.startswith("cuda") else 1024
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    seconds = timed(lambda: a @ b, 20 if device.startswith("cuda") else 3, device)
    return 2 * n**3 / seconds / 1e12


def bare_engine(model, args, dtype: torch.dtype) -> HFEngine:
    loaded = LoadedModel(model=model, tokenizer=None, device=args.device, dtype=str(dtype), source="random")
    template = PromptTemplate("", "", (1,), (1,), (), "BOS, uncounted")
    return HFEngine.bare(loaded, template, list(range(3, model.config.vocab_size)))


def bench_shape(shape: str, args, dtype: torch.dtype) -> dict:
    model = build(shape, args.device, dtype)
    vocab = model.config.vocab_size
    engine = bare_engine(model, args, dtype)
    gen = torch.Generator().manual_seed(0)
    target = torch.randint(3, vocab, (args.target,), generator=gen)
    prompt = torch.randint(3, vocab, (args.free,), generator=gen)
    scorer = TargetScorer(engine, target.tolist(), "ce")
    config = GCGConfig(top_k=256, num_candidates=args.candidates, loss="ce")
    grad, _, _ = scorer.gradient(prompt.to(args.device))
    candidates = sample_candidates(prompt, grad.cpu(), config, gen)[: args.candidates]
    dev_cands = candidates.to(args.device)

    def ours():
        g, _, _ = scorer.gradient(prompt.to(args.device))
        sample_candidates(prompt, g, config, gen)  # top-k on the device, as run_gcg does
        return scorer.score(candidates).loss

    def plain():
        g, _, _ = scorer.gradient(prompt.to(args.device))
        sample_candidates(prompt, g.cpu(), config, gen)
        return plain_hf_losses(model, dev_cands, scorer.prefix, scorer.target)

    agreement = float((ours().float().cpu() - plain().float().cpu()).abs().max())
    if args.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    t_ours = timed(ours, args.steps, args.device)
    peak_ours = torch.cuda.max_memory_allocated() / 2**30 if args.device.startswith("cuda") else None
    t_plain = timed(plain, args.steps, args.device)
    flops = useful_flops(model, candidates.shape[0], 1 + args.free + args.target, args.target)
    return {"shape": shape, "candidates": int(candidates.shape[0]), "free": args.free, "target": args.target,
            "s_per_step_ours": t_ours, "s_per_step_plain_hf": t_plain, "speedup": t_plain / t_ours,
            "tflops_ours": flops / t_ours / 1e12, "tflops_plain_hf": flops / t_plain / 1e12,
            "loss_max_abs_diff": agreement, "peak_gib_ours": peak_ours}


def bench_widths(shape: str, args, dtype: torch.dtype) -> list[dict]:
    """Seconds per target-step for 8 targets, `width` of them per forward, side by side."""
    model = build(shape, args.device, dtype)
    engine, config = bare_engine(model, args, dtype), GCGConfig(top_k=256, num_candidates=args.candidates, loss="ce")
    gen = torch.Generator().manual_seed(0)
    vocab, count = model.config.vocab_size, max(args.widths)
    scorers = [TargetScorer(engine, torch.randint(3, vocab, (args.target,), generator=gen).tolist(), "ce")
               for _ in range(count)]
    prompts = [torch.randint(3, vocab, (args.free,), generator=gen) for _ in range(count)]

    def step(width: int) -> list[torch.Tensor]:
        losses = []
        for at in range(0, count, width):
            group = list(zip(scorers[at:at + width], prompts[at:at + width], strict=True))
            grads = ([s.gradient(p.to(args.device)) for s, p in group] if width == 1
                     else batched.gradients(engine, group))
            cands = [sample_candidates(p, g, config, torch.Generator().manual_seed(1))
                     for (_, p), (g, _, _) in zip(group, grads, strict=True)]
            scores = ([s.score(c) for (s, _), c in zip(group, cands, strict=True)] if width == 1
                      else batched.scores(engine, [(s, c) for (s, _), c in zip(group, cands, strict=True)]))
            losses += [sc.loss for sc in scores]
        return losses

    reference = step(1)
    rows = []
    for width in args.widths:
        diff = max(float((a - b).abs().max()) for a, b in zip(reference, step(width), strict=True))
        seconds = timed(lambda w=width: step(w), args.width_steps, args.device) / count
        rows.append({"bench": "targets_per_forward", "shape": shape, "width": width, "targets": count,
                     "candidates": args.candidates, "free": args.free, "target": args.target,
                     "s_per_target_step": seconds, "loss_max_abs_diff_vs_width_1": diff})
    base = rows[0]["s_per_target_step"]
    for row in rows:
        row["speedup_vs_width_1"] = base / row["s_per_target_step"]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default="1b,8b")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--candidates", type=int, default=512)
    parser.add_argument("--free", type=int, default=20)
    parser.add_argument("--target", type=int, default=64)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--widths", default="", help="targets per forward to compare, e.g. 1,2,4,8")
    parser.add_argument("--width-shapes", default="135m,360m")
    parser.add_argument("--width-steps", type=int, default=2, help="timed rounds of 8 target-steps per width")
    args = parser.parse_args()
    args.widths = sorted({1, *map(int, filter(None, args.widths.split(",")))})
    dtype = getattr(torch, args.dtype)
    floor = matmul_floor(args.device, dtype)
    print(json.dumps({"bench": "matmul_floor", "device": args.device, "tflops": floor}), flush=True)
    for shape in filter(lambda s: s in SHAPES, args.shapes.split(",")):  # "none": widths only
        row = bench_shape(shape, args, dtype)
        row.update(bench="gcg_step", floor_tflops=floor, pct_floor_ours=100 * row["tflops_ours"] / floor)
        print(json.dumps(row), flush=True)
        free_memory(args.device)
    for shape in (args.width_shapes.split(",") if len(args.widths) > 1 else []):
        for row in bench_widths(shape, args, dtype):
            print(json.dumps(row), flush=True)
        free_memory(args.device)


def free_memory(device: str) -> None:
    """The last shape's model and tensors gone before the next is built (an 8B model is 16 GB)."""
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
