"""The library benchmark: a scan of >= 200 documents and >= 1M tokens of real text, with known plants.

    python bench/library/library.py --work DIR                    # the whole library (builds it into DIR once)
    python bench/library/library.py --work DIR --fraction 0.25    # a quarter of its documents, same model
    python bench/library/library.py --work DIR --quick            # a smoke size (24 documents, 30k tokens)

Builds (or reuses, bench/library/library_model.py) the corpus of this machine's installed documentation and
sources with passages planted at known duplication counts and rule-predictable text
(bench/library/library_corpus.py), a tokenizer and a tiny Llama trained on it; writes the documents as .txt
files and turns them into a Parquet corpus with `acr-scan ingest`; scans it with `acr-scan scan`,
locally and with `--executor ray --num-actors 2`, each timed phase by phase with the peak memory of the
driver and the workers (bench/library/library_scan.py); builds each run's report; measures recall of the
plants, what else was flagged and how well each screen statistic predicts the searched verdict
(bench/library/library_figures.py); searches some candidates again with the full budget to re-derive the
early-rejection thresholds on held-out trajectories (bench/library/library_reject.py); and redoes the cost
model from the local run (bench/cluster/scale_model.py --run). Writes one JSON record (--out).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import random
import resource
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

# This checkout's scanner (not an installed one), the library benchmark's sibling modules and
# bench/cluster's scale_model by name (bench/ is not a package), run as `python bench/library/library.py`.
ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "bench" / "library"), str(ROOT / "bench" / "cluster")]

import library_figures as figures  # noqa: E402
import library_reject as reject  # noqa: E402
import library_scan as commands  # noqa: E402
from library_corpus import LibrarySpec  # noqa: E402
from library_model import ModelSpec, build_library  # noqa: E402

log = logging.getLogger("library")
HERE = Path(__file__).resolve().parent
SIZES = {
    # The model sees 30 % of the documents whole and every plant and rule text with its surroundings
    # (library_corpus.py train_share), 10 passes: the whole corpus at 3 passes left the 32-copy
    # passages at 0.78 of their tokens right, in the same training time (3 min).
    "full": (LibrarySpec(train_share=0.3), ModelSpec(epochs=10.0)),
    "quick": (LibrarySpec(tokens=30_000, min_docs=24, doc_chars=(2000, 4000), counts=(1, 4, 16), per_count=1,
                          heldout=2, toc_share=0.1, counting_share=0.1), ModelSpec(epochs=30.0)),
}
# The scan: 32-token spans and context, certificate rows only where the window is nearly right (the
# exhaustive screen forwarded 12x the corpus's tokens on a quarter of it, 4.1x so), the CPU-sized GCG
# of the validity study, one calibration prompt (with 4, calibration was the costliest part of the
# scan: 247 of 780 work seconds, every copy of the header calibrated) and passages merged but not
# extended (32 tokens of extension took 98 s, 660 generations). Chunks of 128 tokens, the length of the
# model's training rows (README: keep --chunk-tokens within the trained context): at the default chunk
# (its 256 positions) the screen found 50 of the 64 32-copy plants, at 128 all 64 (bench/library/library_windows.py).
SCAN = ["--device", "cpu", "--threads", "1", "--span-tokens", "32", "--context-tokens", "32", "--chunk-tokens", "128",
        "--certificate-min-match", "0.9", "--min-match-rate", "0.5", "--steps", "60", "--candidates", "64",
        "--top-k", "64", "--restarts", "0", "--calibration-prompts", "1", "--extend-tokens", "0",
        "--docs-per-shard", "8", "--unit-size", "8"]
# Searched candidates a document, best evidence first: a steps budget (6 a document) let the first unit
# (8 candidates whose certificate generation refuted, 450 steps) spend all of a quarter's, and a Ray run
# overshoot it 5x (units of header spans commit at 0 steps while that unit runs); a count is the same
# for both executors, so their tables compare equal.
CANDIDATES_PER_DOC = 1
RAY = ["--executor", "ray", "--num-actors", "2", "--cpus-per-actor", "1"]


def subset(work: Path, names: list[str], fraction: float, seed: int, label: str) -> Path:
    """WORK/<label>/docs: links to the chosen documents (a seeded share of them)."""
    k = len(names) if fraction >= 1 else max(1, math.ceil(fraction * len(names)))
    chosen = sorted(random.Random(seed + 5).sample(range(len(names)), k))
    folder = work / label / "docs"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for i in chosen:
        os.link(work / "library" / "docs" / names[i], folder / names[i])
    return folder


def scan(corpus: Path, model: Path, out: Path, options: list[str], logs: Path, env: dict, reuse: bool) -> dict:
    """A fresh scan into `out`, timed, and its report; with `reuse`, the record an earlier scan with the
    same options left beside it (OUT.json), when there is one."""
    saved = out.with_suffix(".json")
    if reuse and saved.is_file() and json.loads(saved.read_text()).get("options") == options:
        log.info("reusing the scan recorded in %s", saved)
        return json.loads(saved.read_text())["record"]
    shutil.rmtree(out, ignore_errors=True)
    started = time.time()
    timed = commands.run(commands.cli("-v", "scan", str(corpus), "--model", str(model), "--out", str(out),
                                      *options), logs / f"scan-{out.name}.log", env)
    status = commands.status(out)
    walls = figures.phase_walls(out, started, started + timed["wall_s"])
    report = commands.report(out, out.parent / f"report-{out.name}.html", logs)
    record = {**timed, "phases_wall_s": walls, "status": {k: status.get(k) for k in ("phase", "status_counts", "rows")},
              "progress": _lean(status.get("progress")), "cost": status.get("cost"), "report": report,
              "load_average": os.getloadavg()}
    saved.write_text(json.dumps({"options": options, "record": record}))
    return record


def _lean(progress: dict | None) -> dict | None:
    """status's progress without the per-part commit lists."""
    if not progress:
        return progress
    return {k: ({a: b for a, b in v.items() if a != "commits"} if isinstance(v, dict) else v) for k, v in progress.items()}


def measure(run: Path, truth: dict, trained: str) -> tuple[list[dict], dict]:
    table = figures.rows(run)
    return table, {"categories": figures.by_category(table, truth), "recall": figures.recall(table, truth),
                   "flagged_elsewhere": figures.flagged_elsewhere(table, trained),
                   "predictive_power": figures.predictive_power(table), "identical": figures.identical(table)}


def compare_tables(a: Path, b: Path) -> dict:
    """Two runs' tables row by row, wall-clock columns aside: equal, or how many rows differ and how many
    of those only because one run searched a candidate the other left not_searched (a steps budget lets
    a Ray run overshoot by up to one unit per actor, README "Running on a cluster")."""
    import pyarrow.parquet as pq

    from scanner.schema import WALL_CLOCK

    def rows(run):
        table = pq.read_table(run / "results").to_pylist()
        return {r["span_id"]: {k: v for k, v in r.items() if k not in WALL_CLOCK} for r in table}

    left, right = rows(a), rows(b)
    differ = [k for k in left.keys() | right.keys() if left.get(k) != right.get(k)]
    budget = [k for k in differ if k in left and k in right
              and "not_searched" in (left[k]["status"], right[k]["status"])]
    return {"equal": not differ, "rows": len(left), "differing_rows": len(differ),
            "searched_in_one_run_only": len(budget)}


PLAN_SAMPLE = "0.1"
# The plan's two designs, side by side (scanner/run/plan.py): "two-phase" (the default) screens every
# document and searches every 10th candidate the scan would search along its rank; "documents" screens a
# 10 % sample of the documents and searches every candidate the capped scan would search of them, which
# is the plan of releases before 2026-12-02 (the same searches, the same bytes-scaled projection).
PLAN_DESIGNS = {"two-phase": ["--sample", PLAN_SAMPLE], "documents": ["--sample", "1.0", "--screen-sample", PLAN_SAMPLE]}


def plan_check(corpus: Path, model: Path, folder: Path, options: list[str], logs: Path, runs: dict,
               reuse: bool, seed: int, design: str = "two-phase") -> dict:
    """`acr-scan plan` of `design` drawn with `seed` (the scan's --seed, which also seeds the plan's
    GCG) with the scan's other options, against the scans of the whole library: the projected wall time
    (1 worker at efficiency 1: the local scan; 2 workers at the plan's default 0.85: the Ray scan) and
    each projected figure against the local scan's measured one."""
    options = [*options[:options.index("--seed")], "--seed", str(seed), *options[options.index("--seed") + 2:]]
    out = folder / (f"plan-{design}-s{PLAN_SAMPLE}" + (f"-seed{seed}" if seed else ""))
    saved = folder / f"{out.name}.json"  # not with_suffix: the sample's "0.1" would read as a suffix
    if reuse and saved.is_file() and json.loads(saved.read_text()).get("options") == options:
        planned, timed = (json.loads(saved.read_text())[k] for k in ("plan", "timed"))
    else:
        shutil.rmtree(out, ignore_errors=True)
        timed = commands.run(commands.cli("plan", str(corpus), "--model", str(model), "--out", str(out),
                                          *PLAN_DESIGNS[design], "--workers", "1", "--efficiency", "1.0",
                                          "--json", *options), logs / f"{out.name}.log")
        text = (logs / f"{out.name}.log").read_text()  # the log lines (stderr), then the JSON object (stdout)
        planned = json.loads(text[text.rindex("\n{\n") + 1:] if "\n{\n" in text else text)
        saved.write_text(json.dumps({"options": options, "plan": planned, "timed": timed}))
    return {**figures.plan_against(planned, timed, runs), "seed": seed, "design": design}


def plan_checks(corpus: Path, model: Path, folder: Path, options: list[str], logs: Path, runs: dict, args) -> dict:
    """Every seed of --plan-seeds under each design, seed by seed (one design's cache does not warm the
    other's), and per design the worst seed's wall-time ratio."""
    seeds = [int(x) for x in args.plan_seeds.split(",")]
    designs = [d for d in PLAN_DESIGNS if d in args.plan_designs.split(",")]
    plans = [plan_check(corpus, model, folder, options, logs, runs, args.reuse_runs, seed, design)
             for seed in seeds for design in designs]
    worst = {d: max((p["wall_local"]["ratio"] for p in plans if p["design"] == d), key=lambda r: abs(math.log(r)))
             for d in designs}
    return {"plans": plans, "worst_wall_ratio": worst}


def trajectories(run: Path, table: list[dict], options: list[str], model: Path, count: int, seed: int,
                 reuse: bool) -> dict:
    """`count` candidates of the run searched again with the full budget, and the rule re-derived on
    them; with `reuse`, the trajectories an earlier run recorded for the same candidates (RUN.trajectories.json)."""
    from scanner.cli.main import scan_command, scan_config
    from scanner.config import RejectRule

    args = [str(run / "unused.parquet"), "--model", str(model), "--out", str(run), *options]
    config = scan_config(scan_command.make_context("scan", list(args)).params, args[0])
    chosen = reject.pick(table, count, seed)
    saved, key = run.with_suffix(".trajectories.json"), [r["span_id"] for r in chosen]
    start = time.perf_counter()
    if reuse and saved.is_file() and json.loads(saved.read_text())["spans"] == key:
        recorded, seconds = json.loads(saved.read_text())["recorded"], json.loads(saved.read_text())["seconds"]
    else:
        recorded = reject.record(config, chosen)
        seconds = round(time.perf_counter() - start, 1)
        saved.write_text(json.dumps({"spans": key, "seconds": seconds, "recorded": recorded}))
    shipped = config.search.reject_rule() or RejectRule(after=5, min_right=0.6, stall=0)
    result = reject.rederive(recorded, shipped, ROOT / "bench" / "search" / "early_reject_trajectories.json", seed)
    return {"seconds": seconds, **result, "recorded": recorded}


def cost_model(run: Path, rejection: dict | None, gpus: int = 8, hours: float = 24.0, efficiency: float = 0.85) -> dict:
    """bench/cluster/scale_model.py --run RUN as it stands (this machine's seconds, the run's documents), and for
    1,000 books x 120k tokens at the constants' seconds (8B, H200) with this run's shares and steps, with
    the share of candidates a search budget of what is left of `gpus` x `hours` after the screen reaches.
    `rejection`: the shipped rule judged on this model's trajectories; when the run searched no
    not-memorized candidate (its steps then stay the constant's), its factor replaces the assumed one."""
    import scale_model

    h200 = ["--run", str(run), "--tokens-per-book", "120000", "--timing", "constants", "--gpus", f"1,{gpus},64"]
    inputs, sources = scale_model.measured_inputs(run)
    inputs = scale_model.constant_timing(run, replace(inputs, tokens_per_book=120_000), sources)
    sources["tokens_per_book"] = "given: the issue's books of 120k tokens"
    if rejection and rejection.get("factor") and sources["steps_not_memorized"] == scale_model.SOURCES["steps_not_memorized"]:
        inputs = replace(inputs, rejection_factor=rejection["factor"])
        sources["rejection_factor"] = f"measured: the shipped rule on this model's full-budget trajectories ({rejection['where']})"
    budget = gpus * hours * efficiency - inputs.screen_gpu_s() / 3600
    capped = replace(inputs, budget_gpu_h=max(budget, 0.0))
    table = (scale_model.inputs_table(inputs, sources) + "\n\n" + scale_model.run_table(inputs, efficiency, (1, gpus, 64)))
    return {"as_run": scale_model.main(["--run", str(run)]), "books_h200_command": scale_model.main(h200),
            "books_h200": table,
            "budget": {"gpus": gpus, "hours": hours, "efficiency": efficiency, "search_gpu_h": round(budget, 1),
                       "candidates": round(inputs.candidates), "searched_share": round(capped.searched_share(), 5),
                       "full_search_gpu_h": round(inputs.full_search_gpu_s() / 3600, 1)}}


def rejection(record: dict, size: str) -> dict | None:
    """The shipped rule judged on all of this model's trajectories: this run's, else the quarter's."""
    quarter = HERE / f"{size}-f0.25.json"
    source = record if "early_reject" in record else json.loads(quarter.read_text()) if quarter.is_file() else {}
    judged = (source.get("early_reject") or {}).get("shipped_on_all")
    if not judged:
        return None
    return {"factor": judged["factor"], "where": f"{judged['not_memorized']} not memorized, "
            f"{judged['memorized_full']} memorized, fraction {source['fraction']:g}"}


def growth(quarter: dict, whole: dict) -> dict:
    """Whole over quarter: documents, tokens, spans, candidates, and per run its wall time, each phase's
    wall time, the peak RSS and CPU seconds of the driver and of the workers, the load average at its end."""
    def figures_of(record: dict) -> dict:
        screen = record["runs"]["local"]["cost"]["screen"]
        out = {"documents": record["documents"], "corpus_tokens": screen["corpus_tokens"], "spans": screen["spans"],
               "candidates": screen["candidates"]}
        for name, run in record["runs"].items():
            out[f"{name}_wall_s"] = run["wall_s"]
            out.update({f"{name}_{phase}_wall_s": s for phase, s in run["phases_wall_s"].items()})
            for group, peak in run["rss"].items():
                out[f"{name}_{group}_peak_rss_mb"] = peak["peak_rss_mb_max"]
                if "cpu_s" in peak:
                    out[f"{name}_{group}_cpu_s"] = peak["cpu_s"]
            out[f"{name}_load_average_1min"] = round(run.get("load_average", [0])[0], 1)
        return out

    q, w = figures_of(quarter), figures_of(whole)
    return {k: {"quarter": q[k], "whole": w[k], "ratio": round(w[k] / q[k], 2) if q[k] else None} for k in w if k in q}


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", required=True, help="the library, its model and the runs go here (reused)")
    parser.add_argument("--fraction", type=float, default=1.0, help="share of the documents scanned (0.25: a quarter)")
    parser.add_argument("--quick", action="store_true", help="the smoke size")
    parser.add_argument("--no-ray", action="store_true", help="leave out the Ray scan")
    parser.add_argument("--no-plan", action="store_true", help="leave out the plan from a 10 %% sample")
    parser.add_argument("--trajectories", type=int, default=None,
                        help="candidates searched again with the full budget (default: 24, 4 with --quick; 0 below "
                        "the whole library)")
    parser.add_argument("--reuse-runs", action="store_true",
                        help="keep the scans (with their recorded timings) and trajectories an earlier run of this command left")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plan-seeds", default="0,1,2,3", help="comma-separated seeds of the plans' samples")
    parser.add_argument("--plan-designs", default=",".join(PLAN_DESIGNS),
                        help=f"comma-separated plan designs, of {', '.join(PLAN_DESIGNS)}")
    parser.add_argument("--out", default=None, help="the JSON record (default bench/library/<size>-f<fraction>.json)")
    args = parser.parse_args(argv)
    if not 0 < args.fraction <= 1:
        parser.error(f"--fraction {args.fraction} must be in (0, 1]")
    if args.trajectories is None:
        args.trajectories = 4 if args.quick else 24 if args.fraction <= 0.5 else 0
    return args


def build(args, size: str) -> tuple[Path, dict, dict, str]:
    spec, model = SIZES[size]
    work = Path(args.work).resolve() / size
    built = build_library(work, replace(spec, seed=args.seed), model)
    truth = json.loads((work / "library" / "truth.json").read_text())
    trained = (work / "library" / "trained.txt").read_text()
    return work, built, truth, trained


def scans(corpus: Path, model: Path, folder: Path, options: list[str], logs: Path, args) -> dict:
    """The local scan, then (unless --no-ray) the Ray one, into FOLDER/run-local and FOLDER/run-ray."""
    ray_tmp = tempfile.mkdtemp(prefix="ray-lib-", dir="/tmp")  # Ray's sockets: a short path of its own
    env = {"RAY_TMPDIR": ray_tmp, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    try:
        runs = {"local": scan(corpus, model, folder / "run-local", options, logs, env, args.reuse_runs)}
        if not args.no_ray:
            runs["ray"] = scan(corpus, model, folder / "run-ray", [*options, *RAY], logs, env, args.reuse_runs)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    return runs


def add_trajectories(record: dict, traj: dict, table: list[dict], size: str) -> None:
    """The re-derivation into the record, the trajectories into bench/library/trajectories-SIZE.json, and
    the ROC AUC over the searched candidates and the re-searched ones."""
    path = HERE / f"trajectories-{size}.json"
    path.parent.mkdir(exist_ok=True)
    recorded = traj.pop("recorded")
    path.write_text(json.dumps(recorded, separators=(",", ":")) + "\n")
    record["early_reject"] = {**traj, "file": str(path.relative_to(ROOT))}
    record["predictive_power"]["searched_and_sampled"] = figures.sampled_power(table, recorded)


def main(argv: list[str] | None = None) -> dict:
    args = parse(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    import torch

    torch.set_num_threads(1)  # one thread beats two on two cores other jobs share (measured)
    size, start = "quick" if args.quick else "full", time.perf_counter()
    work, built, truth, trained = build(args, size)
    label = f"f{args.fraction:.2f}"
    folder, logs = subset(work, truth["names"], args.fraction, args.seed, label), work / label / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    corpus = work / label / "corpus.parquet"
    ingested = commands.ingest(folder, corpus, logs)  # the same files give the same bytes: reused scans resume
    docs = len(list(folder.iterdir()))
    options = [*SCAN, "--seed", str(args.seed), "--max-candidates", str(CANDIDATES_PER_DOC * docs)]
    model = work / "library" / "model"
    runs = scans(corpus, model, work / label, options, logs, args)
    table, found = measure(work / label / "run-local", truth, trained)
    record = {"size": size, "fraction": args.fraction, "documents": docs, "library": {k: v for k, v in built.items() if k != "key"},
              "spec": built["key"], "ingest": ingested, "scan_options": options, "ray_options": RAY, "runs": runs,
              **found}
    if "ray" in runs:
        record["ray_vs_local"] = compare_tables(work / label / "run-local", work / label / "run-ray")
    if args.fraction == 1 and not args.no_plan:
        record["plan_checks"] = plan_checks(corpus, model, work / label, options, logs, runs, args)
    if args.trajectories:
        add_trajectories(record, trajectories(work / label / "run-local", table, options, model, args.trajectories,
                                              args.seed, args.reuse_runs), table, size)
    if args.fraction == 1 and (HERE / f"{size}-f0.25.json").is_file():
        record["growth_from_quarter"] = growth(json.loads((HERE / f"{size}-f0.25.json").read_text()), record)
    record["scale_model"] = cost_model(work / label / "run-local", rejection(record, size))
    record["wall_s"] = round(time.perf_counter() - start, 1)
    record["bench_peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    out = Path(args.out) if args.out else HERE / f"{size}-{label}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps({k: record[k] for k in ("size", "fraction", "documents", "wall_s", "recall")}, indent=1))
    return record


if __name__ == "__main__":
    main()
