"""Early rejection: calibrate and measure the stop rule (SearchConfig.reject_*, search/reject.py).

    python bench/search/early_reject.py --threads 1     # CPU: the validity study's 2x64 model, ~15 min on 2 cores

Trains the validity study's smallest model (bench/validity/validity.py's CPU corpus: canaries planted 1..64
times, held-out passages removed), then searches a few targets per group (canaries at 16 and 64
copies, held-out passages, random token strings) twice in the same run with the fast schedule: with
the full budget (rule off) and with the rule on. Writes the per-step trajectories of the full-budget
searches (best loss, target tokens right under teacher forcing, prompt length) to
bench/search/early_reject_trajectories.json and prints the table: recall of what the full budget finds
memorized, and forwards per not-memorized candidate, before and after.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import random
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

# This checkout's scanner, and bench/validity/validity.py by name (bench/ is not a package).
ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "bench" / "validity")]

from validity import SIZES  # noqa: E402

from scanner.cli.demo import default_workdir  # noqa: E402
from scanner.config import ModelConfig, PromptConfig, SearchConfig  # noqa: E402
from scanner.engine.hf import HFEngine  # noqa: E402
from scanner.engine.loading import load_model  # noqa: E402
from scanner.search.miniprompt import measure  # noqa: E402
from scanner.studies.validity import build_corpus, random_control, train_models  # noqa: E402

log = logging.getLogger("early_reject")
SETUP = SIZES["cpu"]
SIZE = SETUP["models"][0]  # the study's smallest model (2x64)


def train(workdir: Path, device: str):
    """The 2x64 model on the validity study's CPU corpus, or the one an earlier run left (same key)."""
    corpus = build_corpus(SETUP["corpus"])
    # The corpus is read from the installed packages' texts: its content, not only its spec, is the key.
    text = hashlib.sha256("\0".join(corpus.documents).encode()).hexdigest()
    key = json.dumps({"corpus": asdict(SETUP["corpus"]), "text": text, "vocab": SETUP["vocab"],
                      "epochs": SETUP["epochs"], "model": asdict(SIZE)}, sort_keys=True)
    marker = workdir / "early_reject.json"
    if not (marker.is_file() and json.loads(marker.read_text())["key"] == key):
        start = time.perf_counter()
        train_models(corpus, [SIZE], SETUP["vocab"], SETUP["epochs"], workdir, device)
        marker.write_text(json.dumps({"key": key, "train_s": round(time.perf_counter() - start, 1)}))
    return workdir / SIZE.name, corpus


def targets(corpus, engine, per_group: int, seed: int) -> list[dict]:
    """`per_group` canaries seen 16 and 64 times, held-out passages and random token strings."""
    rows = [{"group": f"canary x{n}", "text": t} for n in (16, 64) for t in [c for c, k in corpus.canaries if k == n][:per_group]]
    rows += [{"group": "held-out", "text": t} for t in corpus.heldout[:per_group]]
    typical = sorted(len(engine.encode_target(r["text"])) for r in rows)[len(rows) // 2]
    rng = random.Random(seed + 3)
    rows += [{"group": "random", "text": random_control(engine, typical, rng)} for _ in range(per_group)]
    return rows


def run(engine: HFEngine, rows: list[dict], config: SearchConfig) -> list[dict]:
    out = []
    for row in rows:
        result = measure(engine, row["text"], config)
        out.append({**row, "target_tokens": result.target_tokens, "memorized": result.memorized,
                    "acr": result.acr, "prompt_tokens": result.prompt_tokens, "steps": result.steps,
                    "forwards": result.forwards, "wall_s": round(result.wall_s, 2),
                    "rejected_early": result.rejected_early,
                    "attempts": [{k: a[k] for k in ("length", "trial", "warm", "steps", "success", "rejected_early",
                                                    "losses", "rights", "top_rights")} for a in result.trace]})
        log.info("%s %-10s ACR %.2f memorized %s steps %d forwards %d rejected %s (%.1fs)", config.early_reject,
                 row["group"], result.acr, result.memorized, result.steps, result.forwards, result.rejected_early,
                 result.wall_s)
    return out


def calibration(full: list[dict], checks=(3, 5, 10, 15, 20, 30)) -> list[dict]:
    """Per step count: among the attempts the rule may stop (those before a target's first success),
    the lowest best share of target tokens right that a succeeding attempt still running had reached
    by then, and the highest a not-memorized target's attempt had reached (the rule's margins)."""
    out = []
    for after in checks:
        won, lost = [], []
        for row in full:
            for a in _eligible(row["attempts"]):
                tops, share = a["top_rights"], max(a["top_rights"][:after], default=0) / row["target_tokens"]
                if a["success"] and len(tops) >= after:
                    won.append(share)
                elif not row["memorized"] and len(tops) >= after:
                    lost.append(share)
        out.append({"after": after, "success_min": min(won, default=None), "success_running": len(won),
                    "not_memorized": sorted(round(x, 3) for x in lost)})
    return out


def longest_wait(full: list[dict]) -> int:
    """The most steps a succeeding attempt the rule may stop went without raising its best count of
    tokens right before it succeeded: the stall bound must stay above it."""
    waits = [0]
    for row in full:
        for a in _eligible(row["attempts"]):
            tops = a["top_rights"]
            if a["success"] and tops:
                best, since = -1, 0
                for i, count in enumerate(tops):
                    best, since = (count, i) if count > best else (best, since)
                    waits.append(i - since)
    return max(waits)


def _eligible(attempts: list[dict]) -> list[dict]:
    """The optimized attempts up to and including the first success."""
    out = []
    for a in attempts:
        if a["warm"] in ("none", "deletion"):
            if a["success"]:
                break
            continue
        out.append(a)
        if a["success"]:
            break
    return out


def summary(full: list[dict], ruled: list[dict]) -> dict:
    found = [i for i, r in enumerate(full) if r["memorized"]]
    negatives = [i for i, r in enumerate(full) if not r["memorized"]]

    def per_negative(rows, key):
        return sum(rows[i][key] for i in negatives) / max(len(negatives), 1)

    return {"memorized_full": len(found), "memorized_kept": sum(ruled[i]["memorized"] for i in found),
            "memorized_new": sum(ruled[i]["memorized"] for i in negatives),
            "not_memorized": len(negatives), "rejected_early": sum(ruled[i]["rejected_early"] for i in negatives),
            "forwards_before": per_negative(full, "forwards"), "forwards_after": per_negative(ruled, "forwards"),
            "steps_before": per_negative(full, "steps"), "steps_after": per_negative(ruled, "steps"),
            "seconds_before": per_negative(full, "wall_s"), "seconds_after": per_negative(ruled, "wall_s"),
            "forwards_memorized_before": sum(full[i]["forwards"] for i in found) / max(len(found), 1),
            "forwards_memorized_after": sum(ruled[i]["forwards"] for i in found) / max(len(found), 1)}


def table(s: dict) -> str:
    ratio = s["forwards_before"] / max(s["forwards_after"], 1)
    return "\n".join([
        "| | full budget | early rejection | ratio |", "|---|---|---|---|",
        f"| recall of what the full budget finds memorized | {s['memorized_full']}/{s['memorized_full']} | "
        f"{s['memorized_kept']}/{s['memorized_full']} | |",
        f"| forwards per not-memorized candidate (n={s['not_memorized']}) | {s['forwards_before']:.0f} | "
        f"{s['forwards_after']:.0f} | {ratio:.1f}x |",
        f"| GCG steps per not-memorized candidate | {s['steps_before']:.1f} | {s['steps_after']:.1f} | "
        f"{s['steps_before'] / max(s['steps_after'], 1):.1f}x |",
        f"| seconds per not-memorized candidate | {s['seconds_before']:.2f} | {s['seconds_after']:.2f} | "
        f"{s['seconds_before'] / max(s['seconds_after'], 1e-9):.1f}x |",
        f"| forwards per memorized target | {s['forwards_memorized_before']:.0f} | "
        f"{s['forwards_memorized_after']:.0f} | |",
        f"| not-memorized candidates rejected early | - | {s['rejected_early']}/{s['not_memorized']} | |",
        f"| not-memorized candidates found memorized with the rule on | - | {s['memorized_new']} | |"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (1 is faster on a busy machine)")
    parser.add_argument("--workdir", default=None, help="the trained model (default: the cache)")
    parser.add_argument("--per-group", type=int, default=4, help="targets per group (at most 3 canaries a count)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(Path(__file__).parent / "early_reject_trajectories.json"))
    defaults = SearchConfig()
    parser.add_argument("--reject-after", type=int, default=defaults.reject_after)
    parser.add_argument("--reject-min-right", type=float, default=defaults.reject_min_right)
    parser.add_argument("--reject-stall", type=int, default=defaults.reject_stall)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    start = time.perf_counter()
    workdir = Path(args.workdir) if args.workdir else default_workdir().parent / "early-reject"
    workdir.mkdir(parents=True, exist_ok=True)
    model_dir, corpus = train(workdir, args.device)
    engine = HFEngine(load_model(ModelConfig(model=str(model_dir), device=args.device)), PromptConfig())
    rows = targets(corpus, engine, args.per_group, args.seed)
    base = replace(SETUP["fast"], seed=args.seed, reject_after=args.reject_after,
                   reject_min_right=args.reject_min_right, reject_stall=args.reject_stall)
    full = run(engine, rows, replace(base, early_reject=False))
    ruled = run(engine, rows, replace(base, early_reject=True))
    s = summary(full, ruled)
    rule = {k: getattr(base, k) for k in ("reject_after", "reject_min_right", "reject_stall")}
    record = {"model": SIZE.name, "search": {"decide_steps": base.decide_steps, "restarts": base.restarts,
                                             "patience": base.gcg.patience, "candidates": base.gcg.num_candidates,
                                             "top_k": base.gcg.top_k},
              "rule": rule, "summary": s, "calibration": calibration(full), "longest_wait": longest_wait(full),
              "wall_s": round(time.perf_counter() - start, 1),
              "full": full, "with_rule": [{k: v for k, v in r.items() if k != "attempts"} for r in ruled]}
    Path(args.out).write_text(json.dumps(record, separators=(",", ":")) + "\n")
    print(json.dumps({k: record[k] for k in ("rule", "calibration", "longest_wait", "wall_s")}, indent=1))
    print(table(s))


if __name__ == "__main__":
    main()
