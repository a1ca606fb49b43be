"""How far a seconds --search-budget is overshot: a scan of slow candidates (word salad the tiny model
never saw, every span a candidate, early rejection off, so each search runs its whole schedule) under a
budget of a few seconds, with one search unit holding every candidate.

    python bench/budget/budget_overshoot.py [--workdir DIR] [--budget 4] [--steps 30]

Overshoot = the search seconds the committed units recorded (what the budget counts) minus the budget;
`step_s` is the mean seconds of one GCG step of these searches, so the overshoot reads in steps. Run it
on a checkout before the deadline existed to see the old figure (a whole unit past the budget). Then a
relaunch with twice the budget: how many candidates it searched again (0: the verdicts reached before
the cut are kept, only the cut searches go on), and for the search the deadline cut mid-way where it
stood, the steps it spent before the cut and after the relaunch, and a search from scratch's steps (a
relaunch that resumes spends before + after = cold; one that restarts spends cold after the relaunch).
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from scanner.config import (
    CalibrationConfig,
    CorpusConfig,
    GCGConfig,
    ModelConfig,
    ScanConfig,
    ScreenConfig,
    SearchConfig,
    SpanConfig,
)
from scanner.errors import InputError
from scanner.run.driver import run_scan
from scanner.studies.tiny import build_tiny, salad


def corpus(path: Path, docs: int) -> Path:
    rng = random.Random(3)
    pq.write_table(pa.table({"id": [f"d{i}" for i in range(docs)], "text": [salad(rng, 14) for _ in range(docs)]}), path)
    return path


def config(path: Path, model: Path, budget: str, steps: int) -> ScanConfig:
    search = SearchConfig(decide_steps=steps, shrink_steps=steps, restarts=0, early_reject=False,
                          gcg=GCGConfig(top_k=64, num_candidates=96, patience=steps))
    return ScanConfig(corpus=CorpusConfig(path=str(path)), model=ModelConfig(model=str(model), device="cpu"),
                      spans=SpanConfig(span_tokens=12, stride=12), screen=ScreenConfig(context_tokens=16),
                      search=search, min_match_rate=0.0, unit_size=64, search_budget=budget,
                      calibration=CalibrationConfig(random_prompts=0))


def spent(out: Path) -> dict:
    stats = [json.loads(p.read_text()) for p in (out / "search" / "stats").glob("*.json")]
    rows = pq.read_table(out / "results").to_pylist()
    return {"search_s": sum(s["search_s"] for s in stats), "steps": sum(s["steps"] for s in stats),
            "decided": sum(r["status"] in ("memorized", "not_memorized") for r in rows),
            "waiting": sum(r["status"] == "not_searched" for r in rows)}


def cut_records(out: Path) -> dict:
    """{span_id: the stats record of a search the deadline cut mid-way} (not the ones it kept from starting)."""
    return {span: c for p in (out / "search" / "stats").glob("*.json")
            for span, c in json.loads(p.read_text()).get("cut", {}).items() if c["forwards"]}


def resumed(cut: dict, rows: list[dict]) -> list[dict]:
    """Each cut search after the relaunch: where it stood (length, try, steps at that length, the lengths it
    had refuted), its steps before and after the relaunch, and what a search from scratch of the same
    span length spent (the searches that ran whole, not memorized): with a resume, before + after = cold."""
    by = {r["span_id"]: r for r in rows}
    out = []
    for span, record in cut.items():
        row, where = by[span], record.get("resume") or {}
        cold = sorted(r["steps"] for r in rows if r["span_id"] not in cut and r["status"] == "not_memorized"
                      and r["target_tokens"] == row["target_tokens"])
        searched = [a for a in row["attempts"] or [] if a["stage"] == "search"]
        out.append({"cut_at": {k: where.get(k) for k in ("length", "trial", "steps", "refuted")},
                    "steps_before_cut": record["steps"], "steps_after_relaunch": row["steps"],
                    "first_attempt": {k: searched[0][k] for k in ("length", "warm", "max_steps")} if searched else None,
                    "cold_steps": cold[len(cold) // 2] if cold else None, "status": row["status"]})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--budget", type=float, default=4.0, help="seconds")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--docs", type=int, default=6)
    args = parser.parse_args()
    model = build_tiny(Path(args.workdir or tempfile.mkdtemp(prefix="acr-bench-")))
    root = Path(tempfile.mkdtemp(prefix="acr-overshoot-"))
    path, out = corpus(root / "corpus.parquet", args.docs), root / "run"
    start = time.perf_counter()
    run_scan(config(path, model, f"{args.budget:g}s", args.steps), str(out))
    first = {**spent(out), "scan_s": time.perf_counter() - start}
    first["overshoot_s"] = first["search_s"] - args.budget
    first["step_s"] = first["search_s"] / max(first["steps"], 1)
    cut = cut_records(out)
    before = {r["span_id"]: (r["steps"], r["prompt"]) for r in pq.read_table(out / "results").to_pylist()
              if r["status"] != "not_searched"}
    try:
        run_scan(config(path, model, f"{2 * args.budget:g}s", args.steps), str(out))
    except InputError as err:  # a checkout where the budget was part of the run's identity
        again = {"refused": str(err)}
    else:
        rows = pq.read_table(out / "results").to_pylist()
        after = {r["span_id"]: (r["steps"], r["prompt"]) for r in rows}
        again = {**spent(out), "verdicts_kept": sum(after[k] == v for k, v in before.items()),
                 "verdicts_before": len(before), "resumed": resumed(cut, rows)}
    print(json.dumps({"bench": "budget_overshoot", "budget_s": args.budget, "steps_per_attempt": args.steps,
                      "first": first, "relaunch_2x": again}, indent=1))


if __name__ == "__main__":
    main()
