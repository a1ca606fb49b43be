"""Screening throughput on a random-weight Llama shape: corpus tokens/s of stages/screen.py against ONE
teacher-forced pass over the same book with the same model, in the same process.

    python bench/screen/screen_tokens.py --shapes 8b --book-tokens 100000                    # GPU
    python bench/screen/screen_tokens.py --shapes tiny,28m --device cpu --dtype float32 --book-tokens 8000

Screens of the same book side by side (32-token windows, 32 tokens of context): exact windows
exhaustive (every span's span row and certificate rows, the old default), exact two-phase (those rows
only where the window reaches --certificate-min-match 0.5), the default (streamed windows,
stages/stream.py, two-phase at ScreenConfig's gate), and the bare screen (exact, --context-tokens 0). The teacher-forced pass:
the book in chunks of --chunk tokens after BOS, the model's full logits, argmax and NLL of every token
(plain HF); and the same pass computed as the screen computes scores (the head in slices, each reduced
at once: engine/teacher.py), the screen's own lower bound.
Random weights match no token, so the two-phase screens run the window pass alone: this is the
screen's cost on text the model has not memorized. Figures: seconds (the best of --repeats, all runs
interleaved; on a CPU one torch thread and the process's CPU time, since other jobs stretch the wall
clock and a second thread's spinning would count; wall time on a GPU), corpus tokens/s, the ratio to the teacher-forced pass (1 = as fast as one plain pass), forwarded tokens per
corpus token (ScreenWork, unpadded). `--anchors` screens as a scan does, anchored spans included (on
random weights no runs of matches form: the row measures the bookkeeping).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "search"))  # gcg_step; bench/ is not a package
from gcg_step import SHAPES  # noqa: E402
from screen_memory import random_engine, teacher_forced_pass  # noqa: E402

from scanner.config import ScreenConfig, SpanConfig  # noqa: E402
from scanner.engine.hf import HFEngine  # noqa: E402
from scanner.engine.teacher import teacher_scores  # noqa: E402
from scanner.stages.anchor import screen_with_anchors  # noqa: E402
from scanner.stages.read import Document  # noqa: E402
from scanner.stages.screen import ScreenWork, screen_spans  # noqa: E402
from scanner.stages.spans import Span  # noqa: E402

SETTINGS = {  # name: ScreenConfig fields
    "exact-0": {"window": "exact", "certificate_min_match": 0.0},  # exhaustive: the old default
    "exact-0.5": {"window": "exact", "certificate_min_match": 0.5},  # two-phase
    "default": {},  # streamed windows (auto), two-phase at the default gate
    "bare": {"window": "exact", "certificate_min_match": 0.0, "context_tokens": 0},
}


def book_spans(ids: list[int], span: int) -> list[Span]:
    return [Span(doc_id="book", span_id=f"s{i}", token_start=i, token_end=i + span, char_start=i,
                 char_end=i + span, text="", target_ids=ids[i:i + span])
            for i in range(0, len(ids) - span + 1, span)]


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def sliced_pass(engine: HFEngine, docs: list[list[int]], chunk: int) -> None:
    """The same pass the way the screen computes scores (engine/teacher.py: body, then the head on
    slices of positions, each reduced to argmax and NLL at once), no top-k, no overlap: the screen's
    own lower bound."""
    prefix = list(engine.template.prefix_ids)
    seqs = [prefix + ids[a:a + chunk] for ids in docs for a in range(0, len(ids), chunk)]
    teacher_scores(engine, seqs, [len(s) - len(prefix) for s in seqs], [False] * len(seqs), ScreenConfig())


def timed(device: str, run) -> float:
    """Seconds of `run()`: on a CPU the process's CPU time (all its threads), which other jobs on a shared
    machine leave nearly untouched where they stretch the wall clock several-fold; on a GPU the wall
    clock, synchronized."""
    sync(device)
    clock = time.process_time if device == "cpu" else time.perf_counter
    start = clock()
    run()
    sync(device)
    return clock() - start


def best_of(repeats: int, device: str, runs: dict) -> dict:
    """The least seconds of each of `runs` ({name: function}), the runs interleaved `repeats` times so a
    slower stretch of the machine falls on all of them."""
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(repeats):
        for name, run in runs.items():
            best[name] = min(best[name], timed(device, run))
    return best


def screen_book(engine: HFEngine, ids: list[int], config: ScreenConfig, args, anchors: bool) -> ScreenWork:
    """The book a document at a time (--spans-per-call spans), as a scan screens it."""
    work, spans = ScreenWork(), book_spans(ids, args.span)
    for i in range(0, len(spans), args.spans_per_call):
        part = spans[i:i + args.spans_per_call]
        if anchors:
            doc = Document(doc_id="book", text="x" * len(ids))  # one character per token: offsets are positions
            tokens = (ids, [(i, i + 1) for i in range(len(ids))])
            screen_with_anchors(engine, doc, tokens, part, SpanConfig(span_tokens=args.span), config, "bench", work)
        else:
            screen_spans(engine, ids, part, config, work)
    return work


def bench_shape(shape: str, args) -> None:
    dtype = getattr(torch, args.dtype)
    engine = random_engine(shape, args.device, dtype, 4096)
    ids = torch.randint(3, SHAPES[shape]["vocab_size"], (args.book_tokens,),
                        generator=torch.Generator().manual_seed(0)).tolist()
    screen_spans(engine, ids, book_spans(ids, args.span)[:8], ScreenConfig())  # warm-up: kernels, allocator
    works: dict[str, ScreenWork] = {}
    runs = {"teacher-forced pass": lambda: teacher_forced_pass(engine, [ids], args.chunk),
            "teacher-forced pass, sliced head": lambda: sliced_pass(engine, [ids], args.chunk)}
    for name in args.settings.split(","):
        config = ScreenConfig(**{"context_tokens": 32, "chunk_tokens": args.chunk, **SETTINGS[name]})
        runs[name] = lambda n=name, c=config: works.__setitem__(n, screen_book(engine, ids, c, args, args.anchors))
    seconds = best_of(args.repeats, args.device, runs)
    tf, sliced = seconds["teacher-forced pass"], seconds["teacher-forced pass, sliced head"]
    for name, took in seconds.items():
        row = {"bench": "screen", "shape": shape, "setting": name, "book_tokens": len(ids), "seconds": round(took, 3),
               "corpus_tokens_per_s": round(len(ids) / took, 1), "ratio_to_teacher_forced": round(tf / took, 3),
               "ratio_to_sliced_pass": round(sliced / took, 3)}
        if name in works:
            work = works[name].to_dict()
            row.update(anchors=args.anchors,
                       forwarded_per_corpus_token=round(work["forwarded_tokens"] / len(ids), 3),
                       padded_per_corpus_token=round(work["padded_tokens"] / len(ids), 3))
        print(json.dumps(row), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default="8b")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--book-tokens", type=int, default=100_000)
    parser.add_argument("--span", type=int, default=32)
    parser.add_argument("--chunk", type=int, default=1024, help="stream chunk and teacher-forced chunk tokens")
    parser.add_argument("--spans-per-call", type=int, default=1024)
    parser.add_argument("--settings", default="exact-0.5,default,bare", help=f"of {', '.join(SETTINGS)}")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--anchors", action="store_true", help="screen as a scan does, anchored spans included")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads on a CPU (1: its CPU seconds are work, not threads spinning)")
    args = parser.parse_args()
    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    for shape in args.shapes.split(","):
        bench_shape(shape, args)
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
