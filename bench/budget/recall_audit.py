"""Issue 30: does the recall audit's interval hold the truth at its stated rate, and what does it cost?

    python bench/budget/recall_audit.py --work DIR [--tiny DIR] [--docs 12] [--every 3] [--no-certificates] [--budgets 2,6] [--samples 8,16] [--seeds 200]

1. A corpus with a known truth: the tiny Llama's four canaries planted in some documents among word salad
   the model never saw (scanner/studies/tiny.py).
2. The truth: one scan with --min-match-rate 0 and no budget (a census: every span searched), so every
   span's verdict is known, the spans the screen would drop included.
3. A budgeted scan at the default --min-match-rate per budget (--max-candidates B), its audit run for
   real at the first sample size: the audit's verdicts are checked against the census's.
4. The replay: the same run's unsearched parts (run/phases.py `unsearched`, the population the audit
   draws from), drawn again with `measures/recall.py plan_strata` for many seeds and each sample size,
   the census's verdicts as the drawn spans' verdicts. For each draw: the estimate's interval against the
   true missed count. Coverage (the share of draws whose interval holds the truth) should be at least
   the stated 95 %.
Prints one JSON object; bench/budget/RESULTS.md holds a run of it.

    python bench/budget/recall_audit.py --project

5. The 1,000-book projection in the audit's terms, no model: for audit sizes n, the exact interval on
   what the unsearched candidates and the screened-out spans hold, at assumed memorized shares, and the
   audit's GPU-hours at the cost model's seconds per candidate (inputs named in PROJECTION; each an
   input of the library's cost model in bench/library/RESULTS.md, or assumed where marked).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this checkout's scanner

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from scanner.measures import recall  # noqa: E402
from scanner.run.phases import Phases  # noqa: E402
from scanner.run.tasks import UNIT_KINDS  # noqa: E402
from scanner.storage.rundir import RunDir  # noqa: E402
from scanner.studies.tiny import CANARIES, build_tiny, salad  # noqa: E402

CARDS = ["--span-tokens", "12", "--stride", "6", "--context-tokens", "16", "--steps", "10", "--candidates", "64",
         "--top-k", "64", "--restarts", "0", "--calibration-prompts", "0", "--extend-tokens", "0", "--unit-size", "4"]


def corpus(path: Path, docs: int, every: int, seed: int = 5) -> Path:
    """`docs` documents; every `every`-th holds a canary (in turn) between two runs of salad."""
    rng = random.Random(seed)
    texts = [f"{salad(rng, 5)} {CANARIES[(i // every) % len(CANARIES)]} {salad(rng, 5)}" if i % every == 0
             else salad(rng, 22) for i in range(docs)]
    pq.write_table(pa.table({"id": [f"d{i}" for i in range(docs)], "text": texts}), path)
    return path


def scan(model: Path, data: Path, out: Path, *args: str) -> float:
    start = time.perf_counter()  # a finished run relaunched resumes: nothing is searched again
    subprocess.run([sys.executable, "-m", "scanner", "scan", str(data), "--model", str(model), "--out", str(out),
                    *CARDS, *args], check=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def verdicts(out: Path) -> dict[str, str]:
    return {r["span_id"]: r["status"] for r in pq.read_table(out / "results", columns=["span_id", "status"]).to_pylist()}


def population(out: Path) -> dict[str, list[str]]:
    """The audit's population of a finished run: what its budget left and its screen dropped, in rank order."""
    run = RunDir(str(out))
    config = run.scan_config()
    parts = Phases(config, run, run.load_plan()).unsearched()
    return {part: [r["span_id"] for r in rows] for part, rows in parts.items()}


def replay(parts: dict, truth: dict, sample: int, seeds: int) -> dict:
    """Coverage of the interval on the missed count over `seeds` draws, per part and in all."""
    memorized = {part: {s for s in ids if truth[s] == "memorized"} for part, ids in parts.items()}
    held, widths, errors = {"all": 0, **dict.fromkeys(parts, 0)}, [], []
    for seed in range(seeds):
        strata = recall.plan_strata(parts, sample, seed)
        hits = {s["name"]: sum(span in memorized[s["name"].split("/")[0]] for span in s["drawn"]) for s in strata}
        got = recall.summary(strata, hits, found=0)
        true = {part: len(memorized[part]) - sum(v for k, v in hits.items() if k.startswith(part + "/")) for part in parts}
        for part in parts:
            rows = [r for r in got["strata"] if r["stratum"].startswith(part + "/")]
            held[part] += sum(r["missed_low"] for r in rows) <= true[part] <= sum(r["missed_high"] for r in rows)
        held["all"] += got["missed_low"] <= sum(true.values()) <= got["missed_high"]
        widths.append(got["missed_high"] - got["missed_low"])
        if got["missed"] is not None:
            errors.append(got["missed"] - sum(true.values()))
    return {"sample": sample, "draws": seeds, "coverage": {k: v / seeds for k, v in held.items()},
            "mean_width": sum(widths) / seeds,
            "mean_error_of_point": sum(errors) / len(errors) if errors else None,
            "point_known_in": len(errors)}


def cost_share(out: Path) -> dict:
    """The audit's search seconds against the scan's (screen, certify, search) as the units recorded."""
    def seconds(name: str, key: str) -> float:
        folder = out / name / "stats"
        return sum(json.loads(p.read_text()).get(key, 0.0) for p in folder.glob("*.json")) if folder.is_dir() else 0.0
    scan_s = seconds("screen", "seconds") + sum(seconds(k, "search_s") for k in UNIT_KINDS if k != "audit")
    audit_s = seconds("audit", "search_s")
    return {"scan_s": round(scan_s, 1), "audit_s": round(audit_s, 1),
            "audit_share": round(audit_s / (scan_s + audit_s), 3) if scan_s + audit_s else None}


# The cost model's 1,000 books of 120k tokens (bench/library/RESULTS.md, "The cost model redone from this
# run", bench/cluster/scale_model.py):
PROJECTION = {
    "candidates": 538_130, "spans": 3_775_091,  # measured shares applied to the assumed collection
    "search_gpu_h_all": 25_040,  # searching every candidate (the default chunk)
    "day_gpu_h": 192 - 3.1,  # 8 GPUs x 24 h less the screen
}


def project(samples=(100, 400, 1600), shares=(0.029, 0.005, 0.0), confidence=0.95) -> dict:
    """What a day on 8 GPUs can state: the day's search buys the best-ranked candidates at the cost model's
    GPU-seconds per candidate; an audit of n spans, split evenly between the unsearched candidates and
    the screened-out spans (one stratum each: the rank's strata need the real score distribution), costs
    n times that. The hits each draw gets are the expected ones at an assumed memorized share of the
    unsearched candidates (0.029: the share the library's candidates measured; the unsearched rank lower,
    so it is an upper scenario) and of the screened-out spans (0: none found on the tiny corpus, assumed)."""
    per_candidate_s = PROJECTION["search_gpu_h_all"] * 3600 / PROJECTION["candidates"]
    screened_out = PROJECTION["spans"] - PROJECTION["candidates"]
    rows = []
    for n in samples:
        audit_h = n * per_candidate_s / 3600
        searched = int((PROJECTION["day_gpu_h"] - audit_h) * 3600 / per_candidate_s)
        unsearched = PROJECTION["candidates"] - searched
        for share in shares:
            hits = round(share * n / 2)
            got = recall.estimate([recall.Stratum("not_searched", unsearched, n // 2, hits),
                                   recall.Stratum("screened_out", screened_out, n - n // 2, 0)], confidence)
            rows.append({"audit_n": n, "audit_gpu_h": round(audit_h, 1), "searched": searched,
                         "unsearched_candidates": unsearched, "assumed_share": share, "hits": hits,
                         "missed": got["missed"], "missed_interval": [got["missed_low"], got["missed_high"]],
                         "per_stratum_high": {s["stratum"]: s["missed_high"] for s in got["strata"]}})
    return {"per_candidate_gpu_s": round(per_candidate_s, 1), "screened_out": screened_out, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path)
    parser.add_argument("--tiny", type=Path, default=None, help="the tiny model's folder to reuse (default: WORK/tiny)")
    parser.add_argument("--docs", type=int, default=12)
    parser.add_argument("--every", type=int, default=3, help="every this many documents holds a canary")
    parser.add_argument("--no-certificates", action="store_true",
                        help="--certificate-max-tokens 0: the canaries' spans stay candidates (more left unsearched)")
    parser.add_argument("--budgets", default="2,6")
    parser.add_argument("--samples", default="8,16")
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--project", action="store_true", help="only the 1,000-book projection (no model)")
    args = parser.parse_args()
    if args.project:
        print(json.dumps(project(), indent=1))
        return
    args.work.mkdir(parents=True, exist_ok=True)
    model = build_tiny(args.tiny or args.work / "tiny")  # trained once, reused while its spec is unchanged
    data = corpus(args.work / "corpus.parquet", args.docs, args.every)
    if args.no_certificates:
        CARDS.extend(["--certificate-max-tokens", "0"])
    census_s = scan(model, data, args.work / "census", "--min-match-rate", "0", "--audit-sample", "0")
    truth = verdicts(args.work / "census")
    samples = [int(s) for s in args.samples.split(",")]
    out = {"docs": args.docs, "every": args.every, "certificates": not args.no_certificates, "spans": len(truth), "memorized_in_census": sum(v == "memorized" for v in truth.values()),
           "census_s": round(census_s, 1), "budgets": []}
    for budget in (int(b) for b in args.budgets.split(",")):
        run = args.work / f"budget-{budget}"
        seconds = scan(model, data, run, "--max-candidates", str(budget), "--audit-sample", str(samples[0]))
        parts = population(run)
        audited = {r["span_id"]: r["status"] for r in pq.read_table(run / "results").to_pylist()
                   if r["audit_stratum"] and r["searched_as"] is None}  # its copies carry the stratum too
        real = json.loads((run / "recall.json").read_text())
        screened_out = parts["screened_out"]
        out["budgets"].append({
            "max_candidates": budget, "scan_s": round(seconds, 1),
            "population": {part: len(ids) for part, ids in parts.items()},
            "true_memorized": {part: sum(truth[s] == "memorized" for s in ids) for part, ids in parts.items()},
            "screened_out_memorized": sum(truth[s] == "memorized" for s in screened_out),
            "real_audit": {"drawn": real["drawn"], "hits": real["hits"], "missed": real["missed"],
                           "interval": [real["missed_low"], real["missed_high"]], "recall": real["recall"],
                           "recall_interval": [real["recall_low"], real["recall_high"]],
                           "verdicts_agreeing_with_census": sum(audited[s] == truth[s] for s in audited),
                           "audited": len(audited)},
            "cost": cost_share(run),
            "replay": [replay(parts, truth, n, args.seeds) for n in samples]})
        print(json.dumps(out["budgets"][-1]), flush=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
