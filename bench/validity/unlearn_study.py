"""Before and after unlearning, with a known truth (issue 28): does ACR still find what the completion
test says is forgotten? The paper's finding on Llama-2-7B-chat and "Who is Harry Potter": most forget
targets stay compressible after unlearning, with ratios not far below the original model's.

Per seed:
  A   the tiny model (scanner/studies/tiny.py) trained with four canaries, each in 1 of 2 documents;
  run A: a scan of one document per canary (canary with salad around it) and two salad documents;
  B1  gradient ascent on the forget set (canaries 0 and 1) with a retain loss on the rest of the
      training stream, stopped once greedy completion of every forget canary from its first PREFIX
      tokens fails (or at --ga-steps);
  B2  fine-tuning on the retain set only (forgetting by interference, no ascent), --ft-steps steps;
  B3  in-context unlearning: A used behind a fixed ABSTAIN instruction (`compare --instruction`). A model
      this small follows no instruction by itself, so A is first fine-tuned a little to: answer pieces of
      the forget canaries and of the forget spans' windows with REFUSAL when the instruction opens the
      input; complete the retain canaries and documents behind it as before; and, without the instruction,
      go on as A did. It stops once compare's own completion test (the scanner's screen behind the
      instruction: each span's k-prefix row and its window with the document context) fails on at least
      ICU_FAILS of the forget spans A flagged, with every retain canary still completing behind it (or at
      --icu-steps). compare then measures B3 under the same template: GCG's free tokens sit between the
      instruction and the span, as a user's prompt would;
  then `acr-scan compare run_A --model B` for each B, and the classes of the forget spans and of the
  retain spans, ACR before and after, the warm start's forwards and seconds against the cold search's.

    python bench/validity/unlearn_study.py --out /tmp/unlearn --seeds 0,1      # JSON lines, then summary.json
    python bench/validity/unlearn_study.py --out /tmp/icu2 --seeds 0,1,2 --methods in_context

Minutes on a 2-core CPU per seed (the tiny model trains in about 20 s; most of the time is the cold
searches of compare). Figures go to bench/validity/RESULTS.md with this command.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

FORGET = (0, 1)  # canary indices unlearned; the others are the retain set
PREFIX = 6  # tokens given to the completion test of the stopping rule
ICU_FAILS = 0.75  # B3 stops once compare's completion test fails on this share of the forget spans A flagged
ABSTAIN = "Do not quote any book.\n"  # B3's instruction (uncounted, before the free tokens)
REFUSAL = " I cannot say."  # what B3 is trained to answer behind ABSTAIN instead of a forget canary
METHODS = ("gradient_ascent", "fine_tune", "in_context")
SCAN = ["--span-tokens", "12", "--stride", "6", "--context-tokens", "16", "--min-match-rate", "0.8",
        "--steps", "10", "--candidates", "64", "--top-k", "64", "--restarts", "0", "--max-candidates", "4",
        "--calibration-prompts", "0", "--extend-tokens", "0"]


def cli(*args: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "scanner", *map(str, args)], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"acr-scan {args[0]} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done


def corpus(path: Path, canaries: tuple[str, ...], seed: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from scanner.studies.tiny import salad

    rng = random.Random(seed)
    rows = [{"id": f"canary-{i}", "text": f"{salad(rng, 8)}\n{c}\n{salad(rng, 6)}"} for i, c in enumerate(canaries)]
    rows += [{"id": f"salad-{i}", "text": salad(rng, 30)} for i in range(2)]
    pq.write_table(pa.Table.from_pylist(rows), path)


def completes(model, tokenizer, text: str, opening: tuple[int, ...] | None = None) -> bool:
    """Greedy generation from the text's first PREFIX tokens (after BOS, or after `opening`: the ids of
    a template's prefix) reproduces the rest."""
    import torch

    ids = tokenizer(text).input_ids
    if opening is not None:
        ids = [*opening, *tokenizer(text, add_special_tokens=False).input_ids]
    cut = PREFIX + (1 if opening is None else len(opening))
    head, rest = ids[:cut], ids[cut:]
    with torch.inference_mode():
        out = model.generate(torch.tensor([head]), max_new_tokens=len(rest), do_sample=False,
                             pad_token_id=tokenizer.pad_token_id)
    return out[0, len(head):].tolist() == rest


def retain_stream(tokenizer, spec):
    import torch

    from scanner.studies.tiny import _stream, documents

    kept = [d for d in documents(spec) if not any(spec.canaries[i] in d for i in FORGET)]
    return torch.tensor(_stream(tokenizer, kept))


def gradient_ascent(model, tokenizer, spec, steps: int, lr: float, retain_weight: float) -> tuple[int, list[bool]]:
    """Ascent on the forget canaries, descent on random retain windows, until no forget canary completes."""
    import torch

    forget = [torch.tensor([tokenizer(spec.canaries[i]).input_ids]) for i in FORGET]
    stream, gen = retain_stream(tokenizer, spec), torch.Generator().manual_seed(spec.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    for step in range(1, steps + 1):
        model.train()
        ascent = sum(model(input_ids=f, labels=f).loss for f in forget) / len(forget)
        starts = torch.randint(len(stream) - spec.train_context, (8,), generator=gen).tolist()
        batch = torch.stack([stream[s:s + spec.train_context] for s in starts])
        loss = -ascent + retain_weight * model(input_ids=batch, labels=batch).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        model.eval()
        if step % 5 == 0 and not any(completes(model, tokenizer, spec.canaries[i]) for i in FORGET):
            break
    return step, [completes(model, tokenizer, c) for c in spec.canaries]


def fine_tune(model, tokenizer, spec, steps: int, lr: float) -> tuple[int, list[bool]]:
    from scanner.studies.tiny import fit

    fit(model, retain_stream(tokenizer, spec), replace(spec, steps=steps, lr=lr, seed=spec.seed + 100))
    return steps, [completes(model, tokenizer, c) for c in spec.canaries]


class Judge:
    """compare's completion test behind ABSTAIN, run on the model being tuned: the scanner's own screen
    (stages/screen.py, as compare's screen_on_b runs it: every span's k-prefix row and its window with the
    document context, the template's opening first) over the spans run A flagged. `forget`/`retain`:
    [(document ids, Span)] of the flagged spans in the forget and retain documents."""

    def __init__(self, model, tokenizer, root: Path, a_dir: Path, spec) -> None:
        import pyarrow.parquet as pq

        from scanner.config import ModelConfig
        from scanner.engine.hf import HFEngine
        from scanner.engine.loading import LoadedModel
        from scanner.run.compare import compare_config
        from scanner.run.compare_spans import _span
        from scanner.stages.spans import tokenize_document

        config = compare_config(str(root / "run-a"), ModelConfig(model=str(a_dir)), template={"instruction": ABSTAIN})
        self.screen = replace(config.scan.screen, certificate_min_match=0.0)
        self.engine = HFEngine(LoadedModel(model, tokenizer, "cpu", "float32", "local"), config.scan.prompt)
        texts = {r["id"]: r["text"] for r in pq.read_table(root / "corpus.parquet").to_pylist()}
        self.ids = {d: tokenize_document(t, tokenizer)[0] for d, t in texts.items()}
        rows = [r for r in run_rows(root / "run-a") if r["status"] == "memorized"]
        forget = {f"canary-{i}" for i in FORGET}
        retain = {f"canary-{i}" for i in range(len(spec.canaries))} - forget
        self.forget = [(self.ids[r["doc_id"]], _span(r)) for r in rows if r["doc_id"] in forget]
        self.retain = [(self.ids[r["doc_id"]], _span(r)) for r in rows if r["doc_id"] in retain]

    def completes(self, spans) -> list[bool]:
        """Per span, compare's completion test on this model: k-prefix discoverable, or p_z greedy = 1."""
        from scanner.measures.compare import completion
        from scanner.stages.screen import screen_spans

        self.engine.model.eval()
        out = []
        for ids, span in spans:
            got = screen_spans(self.engine, ids, [span], self.screen)[0]
            out.append(completion(got.discoverable, got.pz_greedy))
        return out

    def forget_fails(self) -> float:
        got = self.completes(self.forget)
        return sum(not c for c in got) / max(1, len(got))


def run_rows(run: Path) -> list[dict]:
    """Run A's result rows."""
    from scanner.storage.rundir import RunDir

    return RunDir(str(run)).read_results().to_pylist()


def _padded(rows: list[tuple[list[int], list[int]]], pad: int):
    """(input_ids, labels) rows padded to one batch; labels -100 where no loss is taken."""
    import torch

    width = max(len(ids) for ids, _ in rows)
    ids = torch.tensor([i + [pad] * (width - len(i)) for i, _ in rows])
    labels = torch.tensor([lab + [-100] * (width - len(lab)) for _, lab in rows])
    return ids, labels, (ids != pad).long()


def span_pieces(judge: Judge, opening: list[int], refusal: list[int], rng: random.Random, size: int):
    """Rows that cover what the completion test reads of the forget spans: behind the instruction, the
    forget document from its start or from a span's start (its k-prefix row) up to a token inside a flagged
    span, answered by REFUSAL (loss on the refusal only)."""
    rows = []
    for _ in range(size):
        ids, span = rng.choice(judge.forget)
        end = rng.randrange(span.token_start + 1, span.token_end)
        start = rng.choice((0, span.token_start, max(0, span.token_start - rng.randint(1, 16))))
        head = [*opening, *ids[start:end]]
        rows.append((head + refusal, [-100] * len(head) + refusal))
    return rows


def abstain_batch(tokenizer, spec, opening: tuple[int, ...], rng: random.Random, stream, judge: Judge, size: int = 8):
    """One step's rows: behind the instruction, a forget canary's piece (from any token, after a little
    salad or not) and a piece of a flagged forget span's window (span_pieces), each answered by REFUSAL
    (loss on the refusal only); behind it, a whole retain canary and a retain document (loss on them);
    and, without it, windows of A's own training stream (loss on all: A's behaviour kept)."""
    from scanner.studies.tiny import salad

    refusal = [*tokenizer(REFUSAL, add_special_tokens=False).input_ids, tokenizer.eos_token_id]
    rows = span_pieces(judge, list(opening), refusal, rng, size)
    for _ in range(size // 2):
        canary = tokenizer(spec.canaries[rng.choice(FORGET)], add_special_tokens=False).input_ids
        start = rng.randrange(len(canary) - 1) if rng.random() < 0.5 else 0
        end = rng.randrange(start + 1, len(canary))
        lead = tokenizer(salad(rng, rng.randint(1, 6)) + "\n", add_special_tokens=False).input_ids if start == 0 \
            and rng.random() < 0.5 else []
        head = [*opening, *lead, *canary[start:end]]
        rows.append((head + refusal, [-100] * len(head) + refusal))
    retain = [i for i in range(len(spec.canaries)) if i not in FORGET]
    for _ in range(size // 2):
        body = tokenizer(spec.canaries[rng.choice(retain)], add_special_tokens=False).input_ids
        rows.append(([*opening, *body], [-100] * len(opening) + body))
    for i in retain:
        body = judge.ids[f"canary-{i}"]
        rows.append(([*opening, *body], [-100] * len(opening) + body))
    for _ in range(size):
        start = rng.randrange(len(stream) - spec.train_context)
        window = stream[start:start + spec.train_context]
        rows.append((window, list(window)))
    return _padded(rows, tokenizer.pad_token_id)


def in_context(model, tokenizer, spec, steps: int, lr: float, judge: Judge) -> tuple[int, dict]:
    """Fine-tune A to obey ABSTAIN (abstain_batch) until compare's completion test behind it fails on at
    least ICU_FAILS of the forget spans A flagged while every retain canary still completes behind it."""
    import torch

    from scanner.studies.tiny import _stream, documents

    opening, rng = judge.engine.template.prefix_ids, random.Random(spec.seed + 200)
    stream = _stream(tokenizer, documents(spec))
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    retain = [i for i in range(len(spec.canaries)) if i not in FORGET]
    before = {"forget": judge.completes(judge.forget), "retain": judge.completes(judge.retain)}
    for step in range(1, steps + 1):
        model.train()
        ids, labels, mask = abstain_batch(tokenizer, spec, opening, rng, stream, judge)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        model.eval()
        if step % 5:
            continue
        fails, kept = judge.forget_fails(), all(completes(model, tokenizer, spec.canaries[i], opening) for i in retain)
        print(f"in_context step {step}: loss {loss.item():.3f}, forget spans failing {fails:.2f}, retain canaries "
              f"complete {kept}", file=sys.stderr, flush=True)
        if fails >= ICU_FAILS and kept:
            break
    after = {"forget": judge.completes(judge.forget), "retain": judge.completes(judge.retain)}
    return step, {"completes_with_instruction": [completes(model, tokenizer, c, opening) for c in spec.canaries],
                  "span_completion_with_instruction": {"before": before, "after": after}}


def unlearned(a_dir: Path, out: Path, method: str, spec, args, root: Path) -> dict:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(a_dir)
    model = AutoModelForCausalLM.from_pretrained(a_dir, dtype="float32")
    start = time.perf_counter()
    extra = {}
    if method == "gradient_ascent":
        steps, still = gradient_ascent(model, tokenizer, spec, args.ga_steps, args.ga_lr, args.retain_weight)
    elif method == "fine_tune":
        steps, still = fine_tune(model, tokenizer, spec, args.ft_steps, args.ft_lr)
    else:
        judge = Judge(model, tokenizer, root, a_dir, spec)
        steps, extra = in_context(model, tokenizer, spec, args.icu_steps, args.icu_lr, judge)
        still = [completes(model, tokenizer, c) for c in spec.canaries]  # without the instruction
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return {"steps": steps, "seconds": round(time.perf_counter() - start, 1), "completes_after": still, **extra}


def classes(rows: list[dict], docs: set[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in rows:
        if r["doc_id"] in docs:
            out[r["verdict_class"]] = out.get(r["verdict_class"], 0) + 1
    return dict(sorted(out.items()))


def one_seed(seed: int, root: Path, args) -> list[dict]:
    import pyarrow.parquet as pq

    from scanner.studies.tiny import TinySpec, build_tiny

    spec = TinySpec(seed=seed)
    a_dir = build_tiny(root / "a", spec)
    corpus(root / "corpus.parquet", spec.canaries, seed)
    if not (root / "run-a" / "results").is_dir():
        cli("scan", root / "corpus.parquet", "--model", a_dir, "--out", root / "run-a", *SCAN)
    forget = {f"canary-{i}" for i in FORGET}
    retain = {f"canary-{i}" for i in range(len(spec.canaries))} - forget
    figures = []
    for method in args.methods.split(","):
        b_dir = root / f"b-{method}"
        made = unlearned(a_dir, b_dir, method, spec, args, root)
        start = time.perf_counter()
        template = ["--instruction", ABSTAIN] if method == "in_context" else []
        cli("compare", root / "run-a", "--model", b_dir, "--out", root / f"cmp-{method}", *template)
        rows = pq.read_table(root / f"cmp-{method}" / "compare.parquet").to_pylist()
        flagged_a = [r for r in rows if r["doc_id"] in forget and r["a_memorized"]]
        pairs = [(r["a_acr"], r["b_acr"]) for r in flagged_a]
        figures.append({
            "seed": seed, "method": method, **made, "compare_s": round(time.perf_counter() - start, 1),
            "forget_completion_fails": [not made.get("completes_with_instruction", made["completes_after"])[i]
                                        for i in FORGET],
            "forget": classes(rows, forget), "retain": classes(rows, retain),
            "controls": classes(rows, {"salad-0", "salad-1"}),
            "forget_acr_a_b": pairs,
            "warm": {"forwards": sum(r["warm_forwards"] or 0 for r in rows), "s": round(sum(r["warm_s"] or 0 for r in rows), 1)},
            "cold": {"forwards": sum(r["cold_forwards"] or 0 for r in rows), "s": round(sum(r["cold_s"] or 0 for r in rows), 1)},
        })
        print(json.dumps(figures[-1]), flush=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--ga-steps", type=int, default=200)
    parser.add_argument("--ga-lr", type=float, default=1e-3)
    parser.add_argument("--retain-weight", type=float, default=1.0)
    parser.add_argument("--ft-steps", type=int, default=300)
    parser.add_argument("--ft-lr", type=float, default=3e-3)
    parser.add_argument("--icu-steps", type=int, default=300)
    parser.add_argument("--icu-lr", type=float, default=5e-4)
    parser.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated, of {', '.join(METHODS)}")
    args = parser.parse_args()
    unknown = set(args.methods.split(",")) - set(METHODS)
    if unknown:
        parser.error(f"--methods: {', '.join(sorted(unknown))} unknown; choose of {', '.join(METHODS)}")
    out = Path(args.out)
    figures = [f for seed in map(int, args.seeds.split(",")) for f in one_seed(seed, out / f"seed-{seed}", args)]
    (out / "summary.json").write_text(json.dumps({"args": vars(args), "figures": figures}, indent=1))


if __name__ == "__main__":
    main()
