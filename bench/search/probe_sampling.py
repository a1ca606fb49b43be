"""Probe sampling (issue 20): a draft model screens GCG's candidates, the target scores a few.

    nice -n 10 python bench/search/probe_sampling.py --threads 1 --workdir <dir> [--rules off,p16-R8]

Trains the validity study's two smallest sizes on one corpus (scanner/studies/validity.py: real text
with canaries planted at known duplication counts), the small one as the draft of the large one, then
measures every canary and the controls (held-out passages, random token strings) with the fast
schedule, with and without the draft, interleaved target by target so machine load hits both alike.
Per target: verdict, ACR, steps, target candidate forwards per step, wall and CPU seconds per
searched candidate, the draft's forwards and seconds. Writes bench/search/probe_sampling.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from dataclasses import asdict, replace
from pathlib import Path

from scanner.cli.demo import default_workdir
from scanner.config import DraftConfig, EngineConfig, ModelConfig, PromptConfig, SearchConfig
from scanner.engine.build import build_engines
from scanner.search.miniprompt import measure
from scanner.studies.validity import (
    CorpusSpec,
    ModelSize,
    build_corpus,
    parameters,
    study_targets,
    train_models,
)

log = logging.getLogger("probe_sampling")

CORPUS = CorpusSpec(counts=(1, 16, 64), canaries_per_count=3, heldout=2, max_chars=110_000)
VOCAB, EPOCHS, RANDOM_CONTROLS = 1024, 10, 2
DRAFT = ModelSize(name="draft-2x64", hidden=64, layers=2, heads=4, batch=8, lr=6e-3)
TARGET = ModelSize(name="target-4x192", hidden=192, layers=4, heads=4, batch=8, lr=4e-3)


def train(workdir: Path) -> dict:
    """Both sizes on one tokenizer and token stream, or the models of an earlier run with these settings."""
    key = json.dumps({"corpus": asdict(CORPUS), "vocab": VOCAB, "epochs": EPOCHS,
                      "models": [asdict(DRAFT), asdict(TARGET)]}, sort_keys=True)
    marker, start = workdir / "probe.json", time.perf_counter()
    if marker.is_file() and json.loads(marker.read_text())["key"] == key:
        return json.loads(marker.read_text())["info"]
    sizes = train_models(build_corpus(CORPUS), [DRAFT, TARGET], VOCAB, EPOCHS, workdir)
    info = {"train_s": round(time.perf_counter() - start, 1),
            "models": {n: {**asdict(s), "parameters": parameters(workdir / n)} for n, s in sizes.items()}}
    marker.write_text(json.dumps({"key": key, "info": info}))
    return info


# The product's GCG (256 candidates, top-k 128) under the fast schedule, one attempt of 60 steps a length:
# CPU-sized budgets, the candidate batch as on a GPU (a probe of 16 is 1/16 of it, as in the paper).
SEARCH = SearchConfig(decide_steps=60, shrink_steps=60, restarts=0)
# nanoGCG's rule (probe B/16, R 8, at least one kept), then with a floor on the draft's best the target
# scores, then a larger probe and share: which of them keeps the verdicts and the ACR.
RULES = {"off": None, "p16-R8": DraftConfig(probe_size=16, reduction=8.0, min_kept=1),
         "p16-R8-k16": DraftConfig(probe_size=16, reduction=8.0, min_kept=16),
         "p32-R4-k32": DraftConfig(probe_size=32, reduction=4.0, min_kept=32)}  # the last: DraftConfig()


def searched(result, config: SearchConfig, cpu_s: float) -> dict:
    """One search's figures: verdict, ACR, steps, the target's candidate forwards, seconds (wall, CPU)."""
    trace = result.trace
    steps = sum(a["steps"] for a in trace)
    scored, sampled = sum(a.get("scored", 0) for a in trace), sum(a.get("sampled", 0) for a in trace)
    rhos = [x for a in trace for x in a.get("agreement", [])]
    return {"memorized": result.memorized, "acr": round(result.acr, 4), "prompt_tokens": result.prompt_tokens,
            "prompt": result.prompt, "steps": steps, "sampled": sampled, "target_scored": scored,
            "target_scored_per_step": round(scored / steps, 2) if steps else None,
            "target_forwards": result.forwards, "draft_forwards": result.draft_forwards,
            "draft_s": round(result.draft_s, 3), "wall_s": round(result.wall_s, 3), "cpu_s": round(cpu_s, 3),
            "agreement": round(sum(rhos) / len(rhos), 3) if rhos else None, "rejected_early": result.rejected_early}


def measure_all(engine, targets: list[dict], rules: dict) -> list[dict]:
    """Every target under every rule, the order of the rules rotated target by target (machine load
    falls on all of them alike)."""
    rows, names = [], list(rules)
    for i, target in enumerate(targets):
        for name in names[i % len(names):] + names[:i % len(names)]:
            draft = rules[name]
            gcg = replace(SEARCH.gcg, draft=replace(draft, model=engine.draft_name) if draft else DraftConfig())
            config = replace(SEARCH, gcg=gcg)
            start = time.process_time()
            result = measure(engine, target["text"], config)
            row = {"rule": name, **{k: target[k] for k in ("group", "count")}, "text": target["text"],
                   "target_tokens": result.target_tokens, **searched(result, config, time.process_time() - start)}
            log.info("%s %s x%d: memorized %s ACR %.2f steps %d scored/step %s wall %.2fs", name, row["group"],
                     row["count"], row["memorized"], row["acr"], row["steps"], row["target_scored_per_step"],
                     row["wall_s"])
            rows.append(row)
    return rows


def summary(rows: list[dict]) -> list[dict]:
    """Per rule and group (memorized canaries, unmemorized canaries, held-out, random): sums and ratios."""
    out = []
    for rule in dict.fromkeys(r["rule"] for r in rows):
        for group in dict.fromkeys(_group(r) for r in rows):
            part = [r for r in rows if r["rule"] == rule and _group(r) == group]
            steps = sum(r["steps"] for r in part)
            out.append({"rule": rule, "group": group, "n": len(part), "memorized": sum(r["memorized"] for r in part),
                        "avg_acr": round(sum(r["acr"] for r in part) / len(part), 3), "steps": steps,
                        "target_scored_per_step": round(sum(r["target_scored"] for r in part) / max(steps, 1), 2),
                        "wall_s_per_candidate": round(sum(r["wall_s"] for r in part) / len(part), 3),
                        "cpu_s_per_candidate": round(sum(r["cpu_s"] for r in part) / len(part), 3),
                        "draft_s_per_candidate": round(sum(r["draft_s"] for r in part) / len(part), 3)})
    return out


def ratios(rows: list[dict]) -> list[dict]:
    """Per rule and group, the median over targets of off / rule (CPU seconds, wall seconds, target
    candidate forwards per step): a ratio per target, measured side by side, is robust to load spikes."""
    off = {r["text"]: r for r in rows if r["rule"] == "off"}
    out = []
    for rule in dict.fromkeys(r["rule"] for r in rows if r["rule"] != "off"):
        for group in dict.fromkeys(_group(r) for r in rows):
            part = [(off[r["text"]], r) for r in rows if r["rule"] == rule and _group(r) == group and r["steps"]]
            if not part:
                continue
            out.append({"rule": rule, "group": group, "n": len(part),
                        "cpu_ratio": _median([a["cpu_s"] / b["cpu_s"] for a, b in part]),
                        "wall_ratio": _median([a["wall_s"] / b["wall_s"] for a, b in part]),
                        "forwards_ratio": _median([a["target_scored_per_step"] / b["target_scored_per_step"]
                                                   for a, b in part if a["target_scored_per_step"]]),
                        "same_verdict": sum(a["memorized"] == b["memorized"] for a, b in part),
                        "acr_within_one_token": sum(a["prompt_tokens"] is None and b["prompt_tokens"] is None or
                                                    None not in (a["prompt_tokens"], b["prompt_tokens"]) and
                                                    abs(a["prompt_tokens"] - b["prompt_tokens"]) <= 1 for a, b in part)})
    return out


def _median(values: list[float]) -> float | None:
    values = sorted(values)
    if not values:
        return None
    mid = len(values) // 2
    return round(values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2, 2)


def _group(row: dict) -> str:
    return f"canary x{row['count']}" if row["group"] == "canary" else row["group"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--workdir", default=None, help="trained models (default: the cache)")
    parser.add_argument("--train-only", action="store_true")
    parser.add_argument("--rules", default=",".join(RULES), help=f"a comma-separated subset of {', '.join(RULES)}")
    parser.add_argument("--out", default=None, help="the JSON record (default bench/search/probe_sampling.json)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    import torch

    torch.set_num_threads(args.threads)
    workdir = Path(args.workdir) if args.workdir else default_workdir().parent / "probe-sampling"
    info = train(workdir)
    if args.train_only:
        print(json.dumps(info))
        return
    start = time.perf_counter()
    target, draft = workdir / TARGET.name, workdir / DRAFT.name
    engine = build_engines(ModelConfig(model=str(target), device="cpu"), PromptConfig(),
                           EngineConfig(verify="hf", screen="hf"), draft=str(draft))
    corpus = build_corpus(CORPUS)
    targets = study_targets(corpus, engine, RANDOM_CONTROLS, 0)
    rules = {name: RULES[name] for name in args.rules.split(",")}
    rows = measure_all(engine, targets, rules)
    shown = [f"--rules {args.rules}"] if args.rules != ",".join(RULES) else []
    shown += [f"--out {args.out}"] if args.out else []
    record = {"command": " ".join(["nice -n 10 python bench/search/probe_sampling.py --threads 1 --workdir <dir>", *shown]),
              "date": "2026-12-01", "machine": "x86_64, 2 cores (shared), CPU, torch threads 1",
              "torch": torch.__version__, "corpus": asdict(CORPUS), "vocab": VOCAB, "epochs": EPOCHS, **info,
              "search": asdict(SEARCH), "rules": {k: asdict(v) if v else None for k, v in rules.items()},
              "draft_load_s": round(engine.draft_load_s, 3), "wall_s": round(time.perf_counter() - start, 1),
              "summary": summary(rows), "ratios": ratios(rows), "rows": rows}
    out = Path(args.out or Path(__file__).parent / "probe_sampling.json")
    out.write_text(json.dumps(record, indent=1) + "\n")
    for line in record["summary"] + record["ratios"]:
        print(json.dumps(line))


if __name__ == "__main__":
    main()
