"""Screening throughput: seconds to screen one book with stages/screen.py on a random-weight Llama shape.

    python bench/screen_tokens.py --shapes 8b --book-tokens 100000            # GPU (the <10 s goal)
    python bench/screen_tokens.py --shapes tiny --device cpu --dtype float32 --book-tokens 4000   # smoke test

Three screens of the same book side by side: the exhaustive default (32 tokens of context: a window
row, a span row and one certificate row per context length), the two-phase screen
(--certificate-min-match 0.5: certificate rows only where the window row matches) and the bare screen
(--context-tokens 0). Figures: book seconds, spans/s and tokens/s through the model (unpadded).
`--anchors` adds the default screen with anchored spans (stages/anchor.py) as a scan runs it: on random
weights no runs of greedy matches form, so the row measures the bookkeeping; what anchors cost on
memorized text is bench/anchors.py's figure (anchored spans per fixed window).
"""

from __future__ import annotations

import argparse
import json
import time
from types import SimpleNamespace

import torch
from gcg_step import SHAPES, build, matmul_floor

from scanner.config import ScreenConfig, SpanConfig
from scanner.engine.hf import HFEngine
from scanner.engine.loading import LoadedModel
from scanner.engine.template import PromptTemplate
from scanner.stages.anchor import screen_with_anchors
from scanner.stages.read import Document
from scanner.stages.screen import screen_spans
from scanner.stages.spans import Span


def book_spans(ids: list[int], span: int) -> list[Span]:
    return [Span(doc_id="book", span_id=f"s{i}", token_start=i, token_end=i + span, char_start=i,
                 char_end=i + span, text="", target_ids=ids[i:i + span])
            for i in range(0, len(ids) - span + 1, span)]


def count_tokens(engine: HFEngine) -> list[int]:
    """Wrap engine.logits to count the real (unpadded) tokens of every row it runs."""
    counter, logits = [0], engine.logits

    def counted(ids, *args, attention_mask=None, **kwargs):
        counter[0] += int(attention_mask.sum()) if attention_mask is not None else ids.numel()
        return logits(ids, *args, attention_mask=attention_mask, **kwargs)

    engine.logits = counted
    return counter


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def anchored_screen(engine: HFEngine, ids: list[int], spans: list[Span], config: ScreenConfig, span: int) -> int:
    """Screen as a scan does, anchored spans included; the number of spans screened."""
    doc = Document(doc_id="book", text="x" * len(ids))  # one character per token: offsets are positions
    tokens = (ids, [(i, i + 1) for i in range(len(ids))])
    return len(screen_with_anchors(engine, doc, tokens, spans, SpanConfig(span_tokens=span), config, "bench"))


def bench(engine: HFEngine, ids: list[int], args, context: int, min_match: float, anchors: bool = False) -> dict:
    spans = book_spans(ids, args.span)
    config = ScreenConfig(context_tokens=context, certificate_min_match=min_match)
    screen_spans(engine, ids, spans[:8], config)  # warm-up: kernels, allocator
    sync(args.device)
    counter = count_tokens(engine)
    start = time.perf_counter()
    screened = 0
    for i in range(0, len(spans), args.spans_per_call):  # a document at a time in a real scan
        part = spans[i:i + args.spans_per_call]
        screened += anchored_screen(engine, ids, part, config, args.span) if anchors else len(part)
        if not anchors:
            screen_spans(engine, ids, part, config)
    sync(args.device)
    seconds = time.perf_counter() - start
    tokens = counter[0]
    del engine.logits  # back to the class's method
    return {"context_tokens": context, "certificate_min_match": min_match, "anchors": anchors, "spans": len(spans),
            "screened_spans": screened, "model_tokens": tokens, "book_tokens": len(ids), "book_s": seconds,
            "spans_per_s": len(spans) / seconds, "model_tokens_per_s": tokens / seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default="8b")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--book-tokens", type=int, default=100_000)
    parser.add_argument("--span", type=int, default=32)
    parser.add_argument("--spans-per-call", type=int, default=1024)
    parser.add_argument("--anchors", action="store_true", help="also the default screen with anchored spans")
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    floor = matmul_floor(args.device, dtype)
    for shape in args.shapes.split(","):
        model = build(shape, args.device, dtype)
        vocab = SHAPES[shape]["vocab_size"]
        loaded = LoadedModel(model=model, tokenizer=SimpleNamespace(pad_token_id=0), device=args.device,
                             dtype=str(dtype), source="random")
        engine = HFEngine.bare(loaded, PromptTemplate("", "", (1,), (1,), (), "BOS, uncounted"), [])
        ids = torch.randint(3, vocab, (args.book_tokens,), generator=torch.Generator().manual_seed(0)).tolist()
        params = sum(p.numel() for n, p in model.named_parameters() if "embed" not in n)
        for context, min_match, anchors in ((32, 0.0, False), (32, 0.5, False), (0, 0.0, False),
                                            *([(32, 0.0, True)] if args.anchors else [])):
            row = bench(engine, ids, args, context, min_match, anchors)
            tflops = 2 * params * row["model_tokens_per_s"] / 1e12
            print(json.dumps({"bench": "screen", "shape": shape, **row, "approx_tflops": tflops,
                              "floor_tflops": floor}), flush=True)
        del model, engine
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
