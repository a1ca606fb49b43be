"""Re-check an acr-scanner evidence bundle with nothing but torch and transformers.

    python recheck.py --model PATH [--bundle DIR] [--dtype float32] [--device cpu]

For every row of evidence.jsonl: build the model's input from the prompt *string* as recipe.json says
(the fixed text around it, BOS), check that it gives the ids the scan recorded, generate greedily
len(target_ids) tokens and compare them with the span's ids. Prints each row's match and the smallest
logit margin of the generation (the generated token's logit minus the best other logit, and where), then
a total; exits 0 only when every row matches. It imports nothing of acr-scanner (it is copied as is into
every bundle); `acr-scan verify --bundle` also checks the bundle's hashes and the model's files.
"""

import argparse
import json
import sys
from pathlib import Path


def read_bundle(folder: Path) -> tuple[dict, list[dict], dict]:
    recipe = json.loads((folder / "recipe.json").read_text(encoding="utf-8"))
    lines = (folder / "evidence.jsonl").read_text(encoding="utf-8").splitlines()
    environment = json.loads((folder / "environment.json").read_text(encoding="utf-8"))
    return recipe, [json.loads(line) for line in lines if line.strip()], environment


def load(model: str, dtype: str, device: str, trust_remote_code: bool):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    where, extra = (str(Path(model).parent), {"gguf_file": Path(model).name}) if model.endswith(".gguf") else (model, {})
    tokenizer = AutoTokenizer.from_pretrained(where, trust_remote_code=trust_remote_code, **extra)
    weights = AutoModelForCausalLM.from_pretrained(where, dtype=getattr(torch, dtype),
                                                   trust_remote_code=trust_remote_code, **extra)
    return tokenizer, weights.to(device).eval()


def input_ids(tokenizer, recipe: dict, prompt: str) -> list[int]:
    text = recipe["prefix_text"] + prompt + recipe["suffix_text"]
    return list(recipe["bos_ids"]) + list(tokenizer(text, add_special_tokens=False).input_ids)


def generate(model, ids: list[int], new_tokens: int, stops: list[int]) -> tuple[list[int], list[float]]:
    """Greedy ids and, per generated token, its logit minus the best other logit at that step."""
    import torch
    from transformers import GenerationConfig

    config = GenerationConfig(do_sample=False, num_beams=1, max_new_tokens=new_tokens, repetition_penalty=1.0,
                              eos_token_id=stops or None, pad_token_id=stops[0] if stops else 0,
                              output_logits=True, return_dict_in_generate=True)
    inputs = torch.tensor([ids], device=model.device)
    with torch.no_grad():
        out = model.generate(inputs, attention_mask=torch.ones_like(inputs), generation_config=config)
    chosen = out.sequences[0, len(ids):].tolist()
    margins = []
    for token, logits in zip(chosen, out.logits, strict=False):
        row = logits[0].float().clone()
        gold = row[token].item()
        row[token] = float("-inf")
        margins.append(gold - row.max().item())
    return chosen, margins


def check_row(tokenizer, model, recipe: dict, row: dict) -> tuple[bool, str]:
    """(reproduced, the line to print) for one evidence row."""
    target = list(row["target_ids"])
    ids = input_ids(tokenizer, recipe, row["prompt"])
    expected = row.get("prompt_ids")
    if expected is not None and ids != recipe["prefix_ids"] + list(expected) + recipe["suffix_ids"]:
        return False, "the prompt string does not type into the recorded ids (another tokenizer?)"
    if not ids:
        return False, "the input is empty (no prompt and no fixed tokens): nothing to generate from"
    chosen, margins = generate(model, ids, len(target), recipe["stop_ids"])
    matched = next((i for i, (a, b) in enumerate(zip(chosen, target, strict=False)) if a != b),
                   min(len(chosen), len(target)))
    margins = margins[: len(target)]
    at = min(range(len(margins)), key=margins.__getitem__) if margins else None
    margin = f"margin {margins[at]:.4f} at token {at}" if at is not None else "no margin"
    recorded = row.get("generation_margin")
    scan = f" (scan: {recorded:.4f})" if isinstance(recorded, int | float) else ""
    return chosen[: len(target)] == target, f"{matched}/{len(target)} tokens, {margin}{scan}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Re-check an acr-scanner evidence bundle.")
    parser.add_argument("--model", required=True, help="The model folder (or .gguf file) the bundle names.")
    parser.add_argument("--bundle", default=str(Path(__file__).resolve().parent), help="Default: this folder.")
    parser.add_argument("--dtype", default=None, help="Default: the dtype the scan verified in.")
    parser.add_argument("--device", default=None, help="Default: cuda when available, else cpu.")
    args = parser.parse_args(argv)
    recipe, rows, environment = read_bundle(Path(args.bundle))
    import torch

    dtype = args.dtype or environment.get("scan", {}).get("dtype") or "float32"
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    tokenizer, model = load(args.model, dtype, device, bool(recipe.get("trust_remote_code")))
    good = 0
    for row in rows:
        ok, line = check_row(tokenizer, model, recipe, row)
        good += ok
        print(f"{'MATCH' if ok else 'MISMATCH'} {row.get('doc_id')} {row.get('span_id')}: {line}")
    print(f"{good}/{len(rows)} rows reproduce ({dtype}, {device})")
    return 0 if good == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
