"""The library's screen and search on a random-weight Llama shape, against one raw pass over the same tokens.

    python bench/gpu/library_gpu.py --shapes 1b --book-tokens 30000                                  # GPU
    python bench/gpu/library_gpu.py --shapes tiny --device cpu --dtype float32 --book-tokens 2000   # smoke test

One model, one book-length slice of random token ids, three kinds of rows (JSON lines) from one run:
- raw_pass: one teacher-forced pass over the slice in long chunks (argmax and NLL at every position,
  through HFEngine.logits): what any reading of these tokens costs at least. Corpus tokens per second.
- screen: the scan's screen of the same tokens (stages/anchor.py over stages/screen.py, 32-token spans,
  32 tokens of context, anchored spans), the exhaustive exact-window screen and today's default (streamed
  windows, two-phase at --certificate-min-match 0.75): corpus tokens/s, forwarded tokens per corpus token and
  `raw_passes`, the raw pass's tokens/s over the screen's (how many raw passes one screen costs).
- search: GCG steps of the library's loop (search/gcg.py run_gcg, run by search/driver.py, the default
  GCGConfig) on one span of the slice at the decision length (span - 1 free tokens): seconds per step.

Random weights: no span matches, so no certificate or anchor beyond the first rows is found and no
candidate reaches generation; the rows time the model work a scan does on text it has not memorized.
The search's tokenizer is IdTokenizer (one character per id), so retokenization costs less here than
with a real 128k-token BPE tokenizer.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F

# gcg_step (bench/search) and screen_tokens (bench/screen) by name: bench/ is not a package.
sys.path[:0] = [str(Path(__file__).resolve().parents[1] / s) for s in ("search", "screen")]
from gcg_step import SHAPES, build  # noqa: E402
from screen_tokens import SETTINGS, screen_book, sync  # noqa: E402

from scanner.config import ScreenConfig, SearchConfig  # noqa: E402
from scanner.engine.batched import TargetScorer  # noqa: E402
from scanner.engine.hf import HFEngine  # noqa: E402
from scanner.engine.loading import LoadedModel  # noqa: E402
from scanner.engine.template import PromptTemplate  # noqa: E402
from scanner.search.driver import run_one  # noqa: E402
from scanner.search.gcg import run_gcg  # noqa: E402

BASE = 0x10000  # ids as characters above the Basic Multilingual Plane: no surrogates, no control codes


class IdTokenizer:
    """Token id i <-> the character BASE + i: every id sequence retokenizes to itself, as a benchmark's
    stand-in for a tokenizer whose vocabulary matches a random-weight model."""

    pad_token_id = 0

    def __call__(self, texts: list[str], add_special_tokens: bool = False) -> SimpleNamespace:
        return SimpleNamespace(input_ids=[[ord(c) - BASE for c in text] for text in texts])

    def decode(self, ids: list[int], **_: object) -> str:
        return "".join(chr(BASE + i) for i in ids)

    def batch_decode(self, rows: list[list[int]], **_: object) -> list[str]:
        return [self.decode(row) for row in rows]


@torch.no_grad()
def raw_pass(engine: HFEngine, ids: list[int], chunk: int, batch: int) -> tuple[int, float]:
    """Greedy matches and summed NLL of every next token, the book read in `chunk`-token rows."""
    rows = [ids[i:i + chunk] for i in range(0, len(ids), chunk)]
    rows = [r for r in rows if len(r) > 1]
    matches = torch.zeros((), dtype=torch.long, device=engine.device)
    nll = torch.zeros((), dtype=torch.float64, device=engine.device)
    for at in range(0, len(rows), batch):
        group = rows[at:at + batch]
        for length in sorted({len(r) for r in group}):  # the short last row alone: no padding
            x = torch.tensor([r for r in group if len(r) == length], device=engine.device)
            logits = engine.logits(x)[:, :-1].float()
            gold = x[:, 1:]
            matches += (logits.argmax(-1) == gold).sum()
            nll += F.cross_entropy(logits.transpose(1, 2), gold, reduction="sum").double()
            del logits
    return int(matches), float(nll)


def bench_raw(engine: HFEngine, ids: list[int], args) -> dict:
    raw_pass(engine, ids[: args.chunk * args.batch], args.chunk, args.batch)  # warm-up: kernels, allocator
    sync(args.device)
    start = time.perf_counter()
    matches, nll = raw_pass(engine, ids, args.chunk, args.batch)
    sync(args.device)
    seconds = time.perf_counter() - start
    predicted = sum(len(ids[i:i + args.chunk]) - 1 for i in range(0, len(ids), args.chunk))
    return {"bench": "raw_pass", "chunk": args.chunk, "batch": args.batch, "book_tokens": len(ids),
            "predicted_tokens": predicted, "book_s": seconds, "corpus_tokens_per_s": len(ids) / seconds,
            "greedy_match_rate": matches / predicted, "mean_nll": nll / predicted}


def bench_search(engine: HFEngine, ids: list[int], args) -> dict:
    """Seconds per GCG step of the library's loop, after one warm-up step."""
    config = SearchConfig()
    target, free = ids[: args.span], args.span - 1
    scorer = TargetScorer(engine, target, config.gcg.loss)
    pool = torch.tensor(engine.allowed_ids)
    init = pool[torch.randint(len(pool), (free,), generator=torch.Generator().manual_seed(1))].tolist()

    def steps(count: int):
        search = run_gcg(scorer, init, count, config.gcg, torch.Generator().manual_seed(0), config.verify_retries)
        return run_one(engine, search)

    steps(1)
    sync(args.device)
    start = time.perf_counter()
    done = steps(args.search_steps)
    sync(args.device)
    seconds = time.perf_counter() - start
    outcome = done.value
    return {"bench": "search", "loss": config.gcg.loss, "top_k": config.gcg.top_k,
            "candidates": config.gcg.num_candidates, "free": free, "target": len(target), "steps": outcome.steps,
            "s_per_step": seconds / max(outcome.steps, 1), "forwards": done.forwards,
            "best_loss": outcome.best_loss}


def screen_rows(engine: HFEngine, ids: list[int], args, raw: dict) -> list[dict]:
    """The scan's screen of the slice, anchored spans included, at the exhaustive exact-window setting
    (the release before's default) and at today's default (streamed windows, two-phase)."""
    rows = []
    for name in ("exact-0", "default"):
        config = ScreenConfig(**{"context_tokens": 32, **SETTINGS[name]})  # the scan's chunk (1024)
        sync(args.device)
        start = time.perf_counter()
        work = screen_book(engine, ids, config, args, anchors=True).to_dict()
        sync(args.device)
        per_s = len(ids) / (time.perf_counter() - start)
        rows.append({"bench": "screen", "screen": name, "book_tokens": len(ids), "corpus_tokens_per_s": per_s,
                     "forwarded_per_corpus_token": work["forwarded_tokens"] / len(ids),
                     "raw_passes": raw["corpus_tokens_per_s"] / per_s})
    return rows


def bench_shape(shape: str, args) -> None:
    dtype = getattr(torch, args.dtype)
    model = build(shape, args.device, dtype)
    vocab = SHAPES[shape]["vocab_size"]
    loaded = LoadedModel(model=model, tokenizer=IdTokenizer(), device=args.device, dtype=str(dtype),
                         source="random")
    engine = HFEngine.bare(loaded, PromptTemplate("", "", (1,), (1,), (), "BOS, uncounted"), list(range(3, vocab)))
    ids = torch.randint(3, vocab, (args.book_tokens,), generator=torch.Generator().manual_seed(0)).tolist()
    head = {"shape": shape, "device": args.device, "dtype": args.dtype}
    raw = bench_raw(engine, ids, args)
    print(json.dumps({**head, **raw}), flush=True)  # each row as it is measured: a timeout keeps the rest
    for row in screen_rows(engine, ids, args, raw):
        print(json.dumps({**head, **row}), flush=True)
    print(json.dumps({**head, **bench_search(engine, ids, args)}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default="1b")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--book-tokens", type=int, default=30_000)
    parser.add_argument("--span", type=int, default=32)
    parser.add_argument("--spans-per-call", type=int, default=1024, help="spans per screen call (a document)")
    parser.add_argument("--chunk", type=int, default=2048, help="tokens per row of the raw pass")
    parser.add_argument("--batch", type=int, default=4, help="rows per forward of the raw pass")
    parser.add_argument("--search-steps", type=int, default=5)
    args = parser.parse_args()
    for shape in args.shapes.split(","):
        bench_shape(shape, args)
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
