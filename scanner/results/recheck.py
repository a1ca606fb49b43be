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
import re
import sys
from pathlib import Path

# Characters a terminal acts on (C0 but newline and tab, DEL, C1, bidi overrides): a doc_id of the bundle
# printed raw could retitle or clear the terminal. The same set as scanner/cli/output.py's UNSAFE.
UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


class Refused(Exception):
    """A bundle or a --model this script cannot check: printed as one line, exit 2."""


def safe(value) -> str:
    return UNSAFE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), str(value))


def escape_reason(root: Path, name: str) -> str | None:
    """Why root/name leaves root: an absolute path, '..', or a symbolic link leading out. A deliberate
    copy of scanner/confine.py's rule: this script imports nothing of acr-scanner."""
    if not name or "\x00" in name or "\\" in name or name.startswith("/") or ".." in name.split("/"):
        return "is not a plain name inside the bundle"
    base, target = root.resolve(), (root / name).resolve()
    return None if target == base or base in target.parents else "is a symbolic link leading outside the bundle"


def bundle_text(folder: Path, name: str) -> str:
    reason = escape_reason(folder, name)
    if reason:
        raise Refused(f"{folder / name} {reason}; refused (the bundle is damaged or was altered)")
    if not (folder / name).is_file():
        raise Refused(f"{folder / name} is missing; get the whole bundle as published")
    return (folder / name).read_text(encoding="utf-8", errors="replace")


def bundle_json(folder: Path, name: str) -> dict:
    try:
        value = json.loads(bundle_text(folder, name))
    except json.JSONDecodeError as err:
        raise Refused(f"{folder / name} is not JSON ({err}); the bundle is damaged") from err
    if not isinstance(value, dict):
        raise Refused(f"{folder / name} is not a JSON object; the bundle is damaged")
    return value


def _ids(value) -> bool:
    return isinstance(value, list) and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value)


def evidence_row(line: str):
    """The row on one line of evidence.jsonl, or the reason it is none."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as err:
        return f"not JSON ({err.msg})"
    if not (isinstance(row, dict) and isinstance(row.get("prompt"), str) and _ids(row.get("target_ids"))
            and row["target_ids"] and (row.get("prompt_ids") is None or _ids(row["prompt_ids"]))):
        return "no prompt string and target_ids (a list of token ids)"
    return row


def read_recipe(folder: Path) -> dict:
    recipe = bundle_json(folder, "recipe.json")
    texts, ids = ("prefix_text", "suffix_text"), ("bos_ids", "prefix_ids", "suffix_ids", "stop_ids")
    if not all(isinstance(recipe.get(k), str) for k in texts) or not all(_ids(recipe.get(k)) for k in ids):
        raise Refused(f"{folder / 'recipe.json'} does not hold {', '.join(texts)} (strings) and {', '.join(ids)} "
                      "(lists of token ids); the bundle is damaged")
    return recipe


def read_bundle(folder: Path) -> tuple[dict, list, dict]:
    """(recipe, each evidence line's row or the reason it is none, environment)."""
    recipe = read_recipe(folder)
    lines = bundle_text(folder, "evidence.jsonl").splitlines()
    environment = bundle_json(folder, "environment.json")
    return recipe, [evidence_row(line) for line in lines if line.strip()], environment


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
    try:
        if not Path(args.model).exists():  # never a hub download: the evidence names local files
            raise Refused(f"--model {args.model}: no such folder or file; pass the model's folder (or .gguf file)")
        recipe, rows, environment = read_bundle(Path(args.bundle))
    except Refused as err:
        print(f"error: {safe(err)}", file=sys.stderr)
        return 2
    import torch

    scan = environment.get("scan")
    dtype = args.dtype or (scan.get("dtype") if isinstance(scan, dict) else None) or "float32"
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    tokenizer, model = load(args.model, dtype, device, bool(recipe.get("trust_remote_code")))
    good = 0
    size = model.get_input_embeddings().num_embeddings
    if max((i for k in ("bos_ids", "prefix_ids", "suffix_ids") for i in recipe[k]), default=-1) >= size:
        print(f"error: recipe.json holds token ids outside the model's {size}; another model, or a damaged bundle",
              file=sys.stderr)
        return 2
    for number, row in enumerate(rows, 1):
        if isinstance(row, dict):  # ids the model does not have would make generation fail, not mismatch
            row = row if max(row["target_ids"]) < size else f"a target id is outside the model's {size} ids"
        if isinstance(row, str):
            print(f"DAMAGED evidence row {number}: {row}; it cannot be re-checked")
            continue
        ok, line = check_row(tokenizer, model, recipe, row)
        good += ok
        print(f"{'MATCH' if ok else 'MISMATCH'} {safe(row.get('doc_id'))} {safe(row.get('span_id'))}: {line}")
    print(f"{good}/{len(rows)} rows reproduce ({safe(dtype)}, {safe(device)})")
    return 0 if good == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
