"""Screen modes side by side on a planted corpus: recall of memorized passages against what each mode
forwards, its speed against one teacher-forced pass over the same tokens, and its peak memory.

    python bench/screen/screen_modes.py --model-dir <dir>       # trains scanner.studies.tiny.PLANTED there once

The model memorizes scanner.studies.tiny.PASSAGES (16, 24 and 32 tokens); each document is fresh word
salad (text no model has memorized) with --passages of them planted at random offsets. Every mode
screens every document as a scan does (stages/anchor.py: 16-token windows, then anchored spans), each
in a process of its own (its peak RSS is its own), and reports
- recall: planted passages holding a whole candidate span (greedy-match rate >= 0.5, the scan's
  --min-match-rate, or a certificate), and those holding a span with a certificate;
- false candidates: candidate spans that overlap no planted passage, per 1,000 such spans;
- certificates and discoverable flags of the fixed windows (the spans every mode screens) against the
  exhaustive exact screen's: lost (it has one, the mode not) and different;
- followed: the share of spans (and of spans overlapping no passage) whose window reached the gate, so
  their span and certificate rows ran;
- forwarded tokens per corpus token (ScreenWork, unpadded; the re-encoding factor);
- corpus tokens/s (CPU seconds of the process on one torch thread, the best of --repeats runs
  interleaved with the passes below: other jobs on a shared machine stretch the wall clock, hardly the CPU time), and its ratio to
  ONE teacher-forced pass in the same process: the documents in
  chunks of the stream's length, argmax and NLL of every token from the model's full logits (plain HF),
  and to the same pass computed as the screen computes scores (bench/screen/screen_tokens.py sliced_pass);
- peak RSS (resource.getrusage) of the process.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
from pathlib import Path

import torch
from screen_tokens import best_of, sliced_pass, teacher_forced_pass

from scanner.config import ModelConfig, PromptConfig, ScreenConfig, SpanConfig
from scanner.engine.hf import HFEngine
from scanner.engine.loading import load_model
from scanner.stages.anchor import screen_with_anchors
from scanner.stages.read import Document
from scanner.stages.screen import ScreenWork
from scanner.stages.spans import make_spans, tokenize_document
from scanner.studies.tiny import PASSAGES, PLANTED, build_tiny, salad

# name: ScreenConfig fields (window rows, the greedy-match rate that gates the other rows, and the longest
# certificate: by default one token short of the 16-token span; "-to-context": up to --context-tokens, 32)
MODES = {
    "exact-0": {"window": "exact", "certificate_min_match": 0.0, "certificate_max_tokens": 32},  # exhaustive
    "exact-0.5": {"window": "exact", "certificate_min_match": 0.5},  # two-phase
    "exact-0.75": {"window": "exact", "certificate_min_match": 0.75},
    "stream-0": {"window": "stream", "certificate_min_match": 0.0},
    "stream-0.5": {"window": "stream", "certificate_min_match": 0.5},
    "stream-0.75-to-context": {"window": "stream", "certificate_min_match": 0.75, "certificate_max_tokens": 32},
    "stream-0.75": {"window": "stream", "certificate_min_match": 0.75},  # the default
}
SPAN = 16
REFERENCE = "exact-0"
MIN_MATCH_RATE = 0.5  # ScanConfig's default: a candidate at this greedy-match rate or with a certificate


def corpus(tokenizer, docs: int, passages: int, words: int, seed: int) -> list[tuple[Document, list]]:
    """Documents of salad with `passages` planted passages each, and their token ranges."""
    rng, out = random.Random(seed), []
    for d in range(docs):
        text, at = salad(rng, rng.randint(words // 2, words)), []
        for _ in range(passages):
            passage = rng.choice(PASSAGES)
            text += "\n"
            at.append((len(text), len(text) + len(passage)))
            text += passage + "\n" + salad(rng, rng.randint(words // 2, words))
        _, offsets = tokenize_document(text, tokenizer)
        ranges = [(next(t for t, (x, _) in enumerate(offsets) if x >= a),
                   next(t for t, (x, _) in enumerate(offsets) if x >= b)) for a, b in at]
        out.append((Document(doc_id=f"d{d}", text=text), ranges))
    return out


def screen(engine: HFEngine, docs, config: ScreenConfig) -> tuple[list, ScreenWork]:
    spans_config, work, out = SpanConfig(span_tokens=SPAN), ScreenWork(), []
    for doc, _ in docs:
        tokens = tokenize_document(doc.text, engine.tokenizer)
        live = [s for s in make_spans(doc, engine.tokenizer, spans_config, "bench", tokens) if not s.skipped]
        out.append(screen_with_anchors(engine, doc, tokens, live, spans_config, config, "bench", work))
    return out, work


def one(args) -> dict:
    """One mode in this process: its figures and its per-span results for the comparison."""
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    engine = HFEngine(load_model(ModelConfig(model=args.model_dir, device="cpu")), PromptConfig())
    docs = corpus(engine.tokenizer, args.docs, args.passages, args.words, args.seed)
    tokens = sum(len(tokenize_document(d.text, engine.tokenizer)[0]) for d, _ in docs)
    config = ScreenConfig(context_tokens=32, chunk_tokens=args.chunk, **MODES[args.one])
    ids = [tokenize_document(d.text, engine.tokenizer)[0] for d, _ in docs]
    chunk = min(args.chunk, engine.max_positions - len(engine.template.prefix_ids))
    got = {}
    seconds = best_of(args.repeats, "cpu", {  # CPU seconds, interleaved, the best of each
        "baseline": lambda: teacher_forced_pass(engine, ids, chunk), "sliced": lambda: sliced_pass(engine, ids, chunk),
        "screen": lambda: got.update(zip(("screened", "work"), screen(engine, docs, config), strict=True))})
    screened, work = got["screened"], got["work"]
    baseline, sliced, seconds = seconds["baseline"], seconds["sliced"], seconds["screen"]
    spans = {s.span_id: {"anchored": s.anchored, "gmr": r.greedy_match_rate, "cert": r.certificate_tokens,
                         "disc": r.discoverable, "range": (s.token_start, s.token_end), "doc": d}
             for d, rows in enumerate(screened) for s, r, _ in rows}
    return {"mode": args.one, "corpus_tokens": tokens, "seconds": seconds, "baseline_s": baseline, "sliced_s": sliced,
            "work": work.to_dict(), "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "spans": spans}


def summarize(got: dict, reference: dict, docs: list[list]) -> dict:
    spans = got["spans"]
    inside = {k: any(a <= v["range"][0] and v["range"][1] <= b for a, b in docs[v["doc"]]) for k, v in spans.items()}
    apart = {k: not any(v["range"][0] < b and a < v["range"][1] for a, b in docs[v["doc"]]) for k, v in spans.items()}
    candidate = {k: v["cert"] is not None or v["gmr"] >= MIN_MATCH_RATE for k, v in spans.items()}

    def recall(test) -> float:
        hits = [any(test(v) and v["doc"] == d and a <= v["range"][0] and v["range"][1] <= b for v in spans.values())
                for d, ranges in enumerate(docs) for a, b in ranges]
        return sum(hits) / len(hits)

    fixed = [k for k, v in spans.items() if not v["anchored"] and k in reference["spans"]]
    ref = reference["spans"]
    negatives = [k for k in spans if apart[k]]
    return {"mode": got["mode"],
            "recall_candidate": round(recall(lambda v: v["cert"] is not None or v["gmr"] >= MIN_MATCH_RATE), 3),
            "recall_certificate": round(recall(lambda v: v["cert"] is not None), 3),
            "false_candidates_per_1k": round(1000 * sum(candidate[k] for k in negatives) / max(1, len(negatives)), 2),
            "candidates_in_passages": sum(candidate[k] and inside[k] for k in spans),
            "certificates_lost": sum(ref[k]["cert"] is not None and spans[k]["cert"] is None for k in fixed),
            "certificates_lost_shorter_than_span": sum(ref[k]["cert"] is not None and ref[k]["cert"] < SPAN
                                                       and spans[k]["cert"] is None for k in fixed),
            "certificates_different": sum(None not in (ref[k]["cert"], spans[k]["cert"])
                                          and ref[k]["cert"] != spans[k]["cert"] for k in fixed),
            "discoverable_lost": sum(bool(ref[k]["disc"]) and not spans[k]["disc"] for k in fixed),
            "followed_share": round(sum(v["disc"] is not None for v in spans.values()) / len(spans), 3),
            "followed_without_certificate": sum(v["disc"] is not None and v["cert"] is None for v in spans.values()),
            "followed_share_of_unplanted": round(sum(spans[k]["disc"] is not None for k in negatives)
                                                 / max(1, len(negatives)), 3),
            "forwarded_per_corpus_token": round(got["work"]["forwarded_tokens"] / got["corpus_tokens"], 3),
            "corpus_tokens_per_s": round(got["corpus_tokens"] / got["seconds"], 1),
            "teacher_forced_tokens_per_s": round(got["corpus_tokens"] / got["baseline_s"], 1),
            "ratio_to_teacher_forced": round(got["baseline_s"] / got["seconds"], 3),
            "ratio_to_sliced_pass": round(got["sliced_s"] / got["seconds"], 3),
            "peak_rss_mib": round(got["peak_rss_mib"]), "spans": len(spans)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--docs", type=int, default=8)
    parser.add_argument("--passages", type=int, default=4, help="planted passages per document")
    parser.add_argument("--words", type=int, default=160, help="salad words between passages (at most)")
    parser.add_argument("--chunk", type=int, default=1024, help="--chunk-tokens (the model's positions cap it)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3, help="timings: the best of, interleaved")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: CPU seconds are work, not spinning)")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated names of MODES")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one mode, print its JSON
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args)))
        return
    build_tiny(args.model_dir, PLANTED)
    names = [REFERENCE, *[m for m in args.modes.split(",") if m != REFERENCE]]
    common = [f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items() if k not in ("modes", "one")]
    runs = {}
    for name in names:
        out = subprocess.run([sys.executable, str(Path(__file__)), *common, "--one", name], check=True,
                             stdout=subprocess.PIPE, text=True).stdout
        runs[name] = json.loads(out.strip().splitlines()[-1])
    engine = HFEngine(load_model(ModelConfig(model=args.model_dir, device="cpu")), PromptConfig())
    docs = [ranges for _, ranges in corpus(engine.tokenizer, args.docs, args.passages, args.words, args.seed)]
    print(json.dumps({"bench": "screen_modes", "documents": len(docs), "passages": sum(map(len, docs)),
                      "corpus_tokens": runs[REFERENCE]["corpus_tokens"]}), flush=True)
    for name in names:
        print(json.dumps({"bench": "screen_modes", **summarize(runs[name], runs[REFERENCE], docs)}), flush=True)


if __name__ == "__main__":
    main()
