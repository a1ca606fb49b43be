"""The paper's categories on real weights (issue 37 item 3): `acr` over famous quotes and Wikipedia
chunks (the paper's own targets, ../shared/data/acr-paper/ or --data), random token strings, and text
written after the model's cutoff (bench/validity/plants_text.py's never-trained passages and prose, by sentence),
on SmolLM2-135M (the GGUF) and on the fine-tuned model bench/validity/plants.py builds, one budget for every
target (stated in each record and the table).

    python bench/validity/paper_categories.py run --model smollm2 --out R.jsonl [--per-category 8]
    python bench/validity/paper_categories.py run --model W/model --out R.jsonl
    python bench/validity/paper_categories.py complete --model smollm2 --out R.jsonl   # greedy completion from half
    python bench/validity/paper_categories.py table --out R.jsonl      # a table per category, JSON
    python bench/validity/paper_categories.py markdown --out R.jsonl   # the same as Markdown rows

A run appends one JSON line per finished target and skips what R.jsonl already holds, so a run killed
midway resumes where it stopped (the table counts what is there). The seed's first two claims (famous
quotes compress, unseen text does not) read off the table: portion memorized with an exact 95 %
(Clopper-Pearson) interval, the ACR distribution, and the calibrated verdicts.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import statistics
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from calibration import smollm2_path  # noqa: E402  (bench/ is not a package)
from plants_text import PASSAGES, PROSE  # noqa: E402

DATA = BENCH.parents[2] / "shared" / "data" / "acr-paper"
# "planted": sentences of the passages bench/validity/plants.py trained to completion, the positive control (the
# fine-tuned model memorized them; SmolLM2 never saw them).
CATEGORIES = ("famous", "wikipedia", "unseen", "random", "planted")
# The budget of every target, CPU-sized: the paper's is 200 steps of 100 candidates at top-k 250.
BUDGET = {"steps": 20, "candidates": 64, "top_k": 64, "restarts": 0}


def targets(category: str, n: int, tokenizer, data: Path) -> list[str]:
    """The first n targets of a category, in a fixed order (the same on every run: resumable)."""
    if category == "famous":
        quotes = json.loads((data / "famous_quotes.json").read_text())
        return list(dict.fromkeys(quotes))[:n]
    if category == "wikipedia":
        chunks = json.loads((data / "wikipedia.json").read_text())
        return [c for c in chunks if c.strip() and c.isascii()][:n]
    if category == "unseen":
        text = " ".join([t for strength, t in PASSAGES.values() if strength == "never"] + list(PROSE))
        return [s for s in re.split(r"(?<=[.!?])\s+", text) if 6 <= len(s.split()) <= 25][:n]
    if category == "planted":  # each fully trained passage's first and second half, by words
        halves = [t.split() for strength, t in PASSAGES.values() if strength == "full"]
        return [" ".join(part) for w in halves for part in (w[:len(w) // 2], w[len(w) // 2:])][:n]
    return random_strings(tokenizer, n)


def random_strings(tokenizer, n: int, seed: int = 0) -> list[str]:
    """The paper's random category: 3-17 ids drawn uniformly from the vocabulary, decoded, kept when the
    text is ASCII and re-encodes to as many tokens (a target the search can state)."""
    rng, out = random.Random(seed), []
    vocab = tokenizer.vocab_size
    while len(out) < n:
        ids = [rng.randrange(vocab) for _ in range(rng.randint(3, 17))]
        text = tokenizer.decode(ids)
        if text.strip() and text.isascii() and len(tokenizer(text, add_special_tokens=False).input_ids) == len(ids):
            out.append(text)
    return out


def model_name(model: str) -> str:
    return str(smollm2_path()) if model == "smollm2" else model


def run(model: str, out: Path, per_category: int, data: Path) -> None:
    from scanner.config import GCGConfig, ModelConfig, PromptConfig, SearchConfig
    from scanner.run.measure import build_engine, measure_many

    config = ModelConfig(model=model_name(model), device="cpu")
    engine = build_engine(config, PromptConfig())
    done = {(r["model"], r["category"], r["index"]) for r in read(out)}
    search = SearchConfig(decide_steps=BUDGET["steps"], shrink_steps=BUDGET["steps"], restarts=BUDGET["restarts"],
                          gcg=GCGConfig(num_candidates=BUDGET["candidates"], top_k=BUDGET["top_k"]))
    lists = {c: targets(c, per_category, engine.tokenizer, data) for c in CATEGORIES}
    # Index-major, every category in turn: a run stopped early leaves tables of every category alike.
    todo = [(c, i, lists[c][i]) for i in range(per_category) for c in CATEGORIES
            if i < len(lists[c]) and (model, c, i) not in done]
    for category, i, text in todo:  # one call per target: each record lands before the next search starts
        start = time.perf_counter()
        record = next(measure_many(config, PromptConfig(), search, [{"text": text}], engine=engine))
        row = {"model": model, "category": category, "index": i, "budget": BUDGET,
               "wall_s": round(time.perf_counter() - start, 1),
               **{k: record.get(k) for k in ("target", "target_tokens", "prompt_tokens", "acr", "memorized",
                                             "calibrated_memorized", "predictable", "prompt", "steps")}}
        with out.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps({k: row[k] for k in ("model", "category", "index", "acr", "memorized", "wall_s")}),
              flush=True)


def complete(model: str, out: Path) -> None:
    """Each record without it gets `completion`: greedy generation from the target's first half (its
    first n // 2 tokens, typed as the prompt the search's template wraps) against the second half, the
    (n, p)-discoverable reading beside ACR's. The file is rewritten whole, atomically."""
    from scanner.config import ModelConfig, PromptConfig
    from scanner.run.measure import build_engine

    rows = read(out)
    mine = [r for r in rows if r["model"] == model and "completion" not in r]
    if not mine:
        return
    engine = build_engine(ModelConfig(model=model_name(model), device="cpu"), PromptConfig())
    for r in mine:
        ids = engine.encode_target(r["target"])
        half = len(ids) // 2
        done = engine.verify(engine.decode(ids[:half]), ids[half:])
        r["completion"] = {"prefix_tokens": half, "rest_tokens": len(ids) - half, "matched": done.matched_tokens,
                           "completes": done.verified_generation}
    temp = out.with_suffix(".tmp")
    temp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    temp.replace(out)


def read(out: Path) -> list[dict]:
    return [json.loads(line) for line in out.read_text().splitlines() if line.strip()] if out.exists() else []


def clopper_pearson(k: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """The exact binomial interval (Clopper-Pearson), by bisection on the binomial tail: no SciPy."""
    def tail_at_least(p: float) -> float:  # P(X >= k | p)
        return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k, n + 1))

    def solve(f, target: float) -> float:  # f increasing in p
        lo, hi = 0.0, 1.0
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if f(mid) < target else (lo, mid)
        return (lo + hi) / 2

    low = 0.0 if k == 0 else solve(tail_at_least, alpha / 2)
    above = lambda p: tail_at_least(p) - math.comb(n, k) * p**k * (1 - p) ** (n - k)  # noqa: E731  P(X > k)
    high = 1.0 if k == n else solve(above, 1 - alpha / 2)
    return round(low, 3), round(high, 3)


def table(out: Path) -> list[dict]:
    rows = read(out)
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["model"], r["category"]), []).append(r)
    lines = []
    for (model, category), rs in sorted(groups.items()):
        # A search that found no prompt records ACR |y|/cap, a convention, not a compression: left out.
        acrs = sorted(r["acr"] for r in rs if r["prompt_tokens"] is not None) or [None]
        memorized = sum(bool(r["memorized"]) for r in rs)
        calibrated = sum(bool(r["calibrated_memorized"]) for r in rs)
        lines.append({"model": Path(model).name, "category": category, "n": len(rs),
                      "memorized": memorized, "portion": round(memorized / len(rs), 3),
                      "interval95": clopper_pearson(memorized, len(rs)),
                      "calibrated_memorized": calibrated,
                      "completes_from_half": sum(bool((r.get("completion") or {}).get("completes")) for r in rs),
                      "completion_known": sum("completion" in r for r in rs), "calibrated_interval95": clopper_pearson(calibrated, len(rs)),
                      "prompts_found": sum(r["prompt_tokens"] is not None for r in rs),
                      "acr_all_quartiles": quartiles([r["acr"] for r in rs]),
                      **({"acr_mean": round(statistics.fmean(acrs), 3), "acr_median": round(statistics.median(acrs), 3),
                          "acr_max": round(acrs[-1], 3)} if acrs[0] is not None else {"acr_of_found": None}), "s_per_target": round(statistics.fmean(r["wall_s"] for r in rs), 1),
                      "budget": rs[0]["budget"]})
    return lines


def quartiles(values: list[float]) -> list[float]:
    """Min, lower quartile, median, upper quartile, max: the ACR over every target, those whose search
    found no prompt at the record's |y|/cap (a convention below 1, not a measured compression)."""
    values = sorted(values)
    if len(values) < 2:
        return [round(v, 3) for v in values * 5]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return [round(v, 3) for v in (values[0], q1, q2, q3, values[-1])]


def markdown(lines: list[dict]) -> str:
    """The table per category as Markdown rows (bench/validity/RESULTS.md)."""
    out = ["| model | category | n | memorized (95 % CI) | calibrated memorized (95 % CI) | prompts found | "
           "ACR of found (median, max) | ACR of all (min, q1, median, q3, max) | completes from its first half | "
           "s per target |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in lines:
        acr = f"{r['acr_median']}, {r['acr_max']}" if "acr_median" in r else "-"
        out.append(f"| {r['model']} | {r['category']} | {r['n']} | {r['memorized']} ({r['interval95'][0]}-"
                   f"{r['interval95'][1]}) | {r['calibrated_memorized']} ({r['calibrated_interval95'][0]}-"
                   f"{r['calibrated_interval95'][1]}) | {r['prompts_found']} | {acr} | "
                   f"{', '.join(map(str, r['acr_all_quartiles']))} | {r['completes_from_half']} of "
                   f"{r['completion_known']} | {r['s_per_target']} |")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("run", "complete", "table", "markdown"))
    parser.add_argument("--model", default="smollm2", help="smollm2 (the GGUF) or a model folder")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--per-category", type=int, default=8)
    parser.add_argument("--data", type=Path, default=DATA)
    args = parser.parse_args()
    if args.what == "run":
        run(args.model, args.out, args.per_category, args.data)
    elif args.what == "complete":
        complete(args.model, args.out)
    elif args.what == "table":
        print(json.dumps(table(args.out), indent=1))
    else:
        print(markdown(table(args.out)))


if __name__ == "__main__":
    main()
