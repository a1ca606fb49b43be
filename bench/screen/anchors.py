"""Anchored windows on a planted corpus: recall of memorized passages and screen tokens, by windowing.

    python bench/screen/anchors.py --model-dir /tmp/planted --docs 8      # trains scanner.studies.tiny.PLANTED there once

The model memorizes passages of 16, 24 and 32 tokens (1, 1.5 and 2 spans of 16: scanner.studies.tiny.PASSAGES);
each test document holds one of them at a random token offset inside fresh word salad. For each windowing
(stride, anchors on/off, run threshold, bridged gap) it screens every document as a scan does
(stages/anchor.py) and reports
- recall: passages holding a whole candidate span (greedy-match rate >= 0.5 or a certificate), the
  condition for the search to find a span of the passage memorized;
- spans and model tokens screened (window, span and certificate rows, unpadded), against fixed windows.
"""

from __future__ import annotations

import argparse
import json
import random
import time

from scanner.config import ModelConfig, PromptConfig, ScreenConfig, SpanConfig
from scanner.engine.hf import HFEngine
from scanner.engine.loading import load_model
from scanner.stages.anchor import screen_with_anchors
from scanner.stages.read import Document
from scanner.stages.screen import ScreenWork
from scanner.stages.spans import make_spans, tokenize_document
from scanner.studies.tiny import PASSAGES, PLANTED, build_tiny, planted_document


def corpus(tokenizer, docs: int, seed: int) -> list[tuple[Document, int, int]]:
    """(document, passage token start, token end) for `docs` documents per passage."""
    rng, out = random.Random(seed), []
    for p, passage in enumerate(PASSAGES):
        for i in range(docs):
            text, at = planted_document(rng, passage)
            _, offsets = tokenize_document(text, tokenizer)
            start = next(t for t, (a, _) in enumerate(offsets) if a >= at)
            end = next(t for t, (a, _) in enumerate(offsets) if a >= at + len(passage))
            out.append((Document(doc_id=f"p{p}-{i}", text=text), start, end))
    return out


def measure(engine: HFEngine, docs, spans_config: SpanConfig, screen: ScreenConfig, min_match: float) -> dict:
    work = ScreenWork()
    found, spans, anchored, start = 0, 0, 0, time.perf_counter()
    for doc, first, end in docs:
        tokens = tokenize_document(doc.text, engine.tokenizer)
        live = [s for s in make_spans(doc, engine.tokenizer, spans_config, "bench", tokens) if not s.skipped]
        screened = screen_with_anchors(engine, doc, tokens, live, spans_config, screen, "bench", work)
        spans += len(screened)
        anchored += sum(s.anchored for s, _, _ in screened)
        found += any(first <= s.token_start and s.token_end <= end
                     and (r.greedy_match_rate >= min_match or r.certificate_tokens is not None)
                     for s, r, _ in screened)
    seconds = time.perf_counter() - start
    return {"passages": len(docs), "recall": found / len(docs), "spans": spans, "anchored": anchored,
            "model_tokens": work.tokens, "seconds": round(seconds, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--docs", type=int, default=8, help="documents per passage")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--context-tokens", type=int, default=32)
    parser.add_argument("--quick", action="store_true", help="leave out the stride-8 windows (2x the tokens)")
    args = parser.parse_args()
    model = build_tiny(args.model_dir, PLANTED)
    engine = HFEngine(load_model(ModelConfig(model=str(model), device="cpu")), PromptConfig())
    docs = corpus(engine.tokenizer, args.docs, args.seed)
    # the exhaustive exact screen these figures were first measured with (bench/screen/RESULTS.md)
    screen = ScreenConfig(context_tokens=args.context_tokens, window="exact", certificate_min_match=0.0)
    settings = [("fixed", {"anchors": False}), ("stride 8", {"anchors": False, "stride": 8})][:1 if args.quick else 2]
    settings += [(f"anchors run>={run} gap {gap}", {"anchor_min_run": run, "anchor_max_gap": gap})
                 for run, gap in ((12, 0), (12, 1), (8, 1))]
    base = None
    for name, fields in settings:
        row = measure(engine, docs, SpanConfig(span_tokens=16, **fields), screen, 0.5)
        base = base or row["model_tokens"]
        print(json.dumps({"bench": "anchors", "windowing": name, **row,
                          "tokens_vs_fixed": round(row["model_tokens"] / base, 3)}), flush=True)


if __name__ == "__main__":
    main()
