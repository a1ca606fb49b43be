"""The default screen of memorized text, its forwards replayed on larger shapes: what the screen costs on
a model whose time is in its matrices, against one teacher-forced pass over the same tokens.

    python bench/screen/screen_replay.py --model-dir <dir> --shapes 28m,135m --device cpu   # trains PLANTED once
    python bench/screen/screen_replay.py --model-dir <dir> --shapes 1b,8b --device cuda --dtype bfloat16

bench/screen/screen_modes.py's planted corpus (word salad with scanner.studies.tiny.PASSAGES planted in it) is
screened at ScreenConfig's defaults as a scan screens it (anchored spans included) by the tiny model
trained to memorize the passages; every forward the screen asks for (engine/teacher.py's rows: the
streamed chunks, span rows, certificate rows with their cuts) is recorded through the screener hook
vLLM uses. A random-weight Llama of each shape (bench/search/gcg_step.py SHAPES) then forwards the same rows,
timed, beside one plain teacher-forced pass over the same corpus tokens (full logits, argmax, NLL, in
chunks of the tiny model's positions, as the recorded stream) and the sliced pass (the screen's own way,
no top-k: its lower bound). Which rows go on is decided by the tiny model's memorization and the cost by
the shape: assumed, not measured, is that a larger model memorizing these passages sends on the same
rows. Seconds as in screen_tokens.py: CPU time of the process on one torch thread (best of --repeats,
interleaved), wall time on a GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "search"))  # gcg_step; bench/ is not a package
from gcg_step import SHAPES  # noqa: E402
from screen_memory import random_engine, teacher_forced_pass  # noqa: E402
from screen_modes import corpus, screen  # noqa: E402
from screen_tokens import best_of, sliced_pass  # noqa: E402

from scanner.config import ModelConfig, PromptConfig, ScreenConfig, SpanConfig  # noqa: E402
from scanner.engine.hf import HFEngine  # noqa: E402
from scanner.engine.loading import load_model  # noqa: E402
from scanner.engine.teacher import teacher_scores  # noqa: E402
from scanner.stages.spans import tokenize_document  # noqa: E402
from scanner.stages.stream import chunk_tokens  # noqa: E402
from scanner.studies.tiny import PLANTED, build_tiny  # noqa: E402


class Recorder:
    """A screener (the hook engine/teacher.py hands rows to instead of HF) that keeps every call and
    scores it with the plain HF engine, so the screen runs as it would without it."""

    def __init__(self, engine: HFEngine, config: ScreenConfig) -> None:
        self.engine, self.config, self.calls = engine, config, []

    def prompt_scores(self, seqs, tails, topk_rows, top_k, temperature):
        self.calls.append((seqs, tails, topk_rows))
        return teacher_scores(self.engine, seqs, tails, topk_rows, self.config).rows


# The default screen, and the one before 2026-12-02 beside it: certificates tried up to the whole
# --context-tokens (32) instead of one token short of the 16-token span.
CONFIGS = {"default": ScreenConfig(), "certificates_to_context": ScreenConfig(certificate_max_tokens=32)}


def record(args, config: ScreenConfig) -> tuple[list, list[list[int]], int]:
    """The recorded calls of the screen under `config`, the documents' token ids and the stream's chunk."""
    build_tiny(args.model_dir, PLANTED)
    loaded = load_model(ModelConfig(model=args.model_dir, device="cpu"))
    plain, hooked = HFEngine(loaded, PromptConfig()), HFEngine(loaded, PromptConfig())
    hooked.screener = Recorder(plain, config)
    docs = corpus(plain.tokenizer, args.docs, args.passages, args.words, args.seed)
    screen(hooked, docs, config)
    ids = [tokenize_document(d.text, plain.tokenizer)[0] for d, _ in docs]
    return hooked.screener.calls, ids, chunk_tokens(plain, config, config.context_tokens + SpanConfig().span_tokens)  # the stream's own


def replay(engine: HFEngine, calls: list, kinds: tuple[bool, ...]) -> None:
    """The recorded calls of these kinds (True: window chunks with top-k; False: span and certificate rows)."""
    config = ScreenConfig()
    for seqs, tails, topk in calls:
        if topk[0] in kinds:
            teacher_scores(engine, seqs, tails, topk, config)


def bench_shape(shape: str, recorded: dict[str, list], ids: list[list[int]], chunk: int, args) -> dict:
    """Each recorded screen replayed on `shape` beside the plain and sliced passes, interleaved."""
    engine = random_engine(shape, args.device, getattr(torch, args.dtype), 4096)
    replay(engine, recorded["default"][:2], (True, False))  # warm-up: kernels, allocator
    tokens = sum(len(d) for d in ids)
    timed = {"plain": lambda: teacher_forced_pass(engine, ids, chunk), "sliced": lambda: sliced_pass(engine, ids, chunk),
             "windows": lambda: replay(engine, recorded["default"], (True,))}
    for name, calls in recorded.items():  # the windows are the same calls in both: timed once
        timed[f"rows_{name}"] = lambda calls=calls: replay(engine, calls, (False,))
    seconds = best_of(args.repeats, args.device, timed)
    out = {"bench": "screen_replay", "shape": shape, "device": args.device, "dtype": args.dtype,
           "corpus_tokens": tokens, **{f"{k}_s": round(v, 3) for k, v in seconds.items()}}
    for name in recorded:
        screen_s = seconds["windows"] + seconds[f"rows_{name}"]
        out[name] = {"screen_s": round(screen_s, 3), "screen_tokens_per_s": round(tokens / screen_s, 1),
                     "ratio_to_plain_pass": round(seconds["plain"] / screen_s, 3),
                     "ratio_to_sliced_pass": round(seconds["sliced"] / screen_s, 3),
                     "rows_share_of_screen": round(seconds[f"rows_{name}"] / screen_s, 3)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--shapes", default="tiny,28m", help=f"comma-separated, of {', '.join(SHAPES)}")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--docs", type=int, default=4)
    parser.add_argument("--passages", type=int, default=4, help="planted passages per document")
    parser.add_argument("--words", type=int, default=160, help="salad words between passages (at most)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.device == "cpu":
        torch.set_num_threads(1)  # CPU seconds are then work, not a second thread spinning
    recorded = {}
    for name, config in CONFIGS.items():
        calls, ids, chunk = record(args, config)
        forwarded = sum(len(s) for seqs, _, _ in calls for s in seqs)
        rows = sum(len(s) for seqs, _, topk in calls if not topk[0] for s in seqs)
        recorded[name] = calls
        print(json.dumps({"bench": "screen_replay", "screen": name, "calls": len(calls), "chunk": chunk,
                          "corpus_tokens": sum(map(len, ids)),
                          "forwarded_per_corpus_token": round(forwarded / sum(map(len, ids)), 3),
                          "rows_per_corpus_token": round(rows / sum(map(len, ids)), 3)}), flush=True)
    for shape in args.shapes.split(","):
        print(json.dumps(bench_shape(shape, recorded, ids, chunk, args)), flush=True)


if __name__ == "__main__":
    main()
