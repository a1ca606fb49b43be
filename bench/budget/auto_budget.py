"""A budget that stops itself (issue 30 item 2): which trailing window and yield threshold to ship for
`--search-budget auto`, replayed over verdicts recorded along the rank of the library benchmark.

    python bench/budget/auto_budget.py record --work DIR [--candidates 320]   # scan, write bench/budget/auto_budget.json
    python bench/budget/auto_budget.py replay [--data bench/budget/auto_budget.json] # the table of RESULTS.md

`record` builds (or reuses) the quick library of bench/library/library.py (its plants at known duplication counts,
its tiny Llama), scans it with the benchmark's options and `--max-candidates N` (the first N candidates of
the rank searched, in units of 8), and writes, per search unit in rank order, each candidate's verdict,
its GCG steps and seconds, its category (plant xN, header, background...: bench/library/library_figures.py) and
the spans that took its verdict (copies, and the planted spans among them). `replay` is pure: for each
window W and threshold it applies scanner.measures.budget.auto_stop (the scanner's own rule) to the
recorded units and reports where it stops: candidates searched, steps, memorized targets and planted
spans found and missed against searching the whole recorded stretch; fixed steps budgets beside it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

# This checkout's scanner and bench/library's modules by name (bench/ is not a package).
sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parents[1] / "library")]

HERE = Path(__file__).resolve().parent
DATA = HERE / "auto_budget.json"


def record(work: str, candidates: int, out: Path) -> dict:
    import library
    import library_scan as commands

    args = library.parse(["--work", work, "--quick"])
    root, built, truth, _ = library.build(args, "quick")
    folder = library.subset(root, truth["names"], 1.0, args.seed, "auto")
    logs = root / "auto" / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    corpus = root / "auto" / "corpus.parquet"
    commands.ingest(folder, corpus, logs)
    options = [*library.SCAN, "--seed", str(args.seed), "--max-candidates", str(candidates)]
    run = root / "auto" / "run"
    library.scan(corpus, root / "library" / "model", run, options, logs, {}, reuse=True)
    return extract(run, root / "library" / "truth.json", out, options)


def extract(run: Path, truth_path: Path, out: Path, options: list[str] | None = None) -> dict:
    """The verdicts of the search units of RUN that are done in a prefix along the rank (a scan stopped
    early gives what it committed), with each candidate's category and copies, into OUT."""
    from scanner.storage.store import Store

    truth = json.loads(truth_path.read_text())
    regions = defaultdict(list)
    for region in truth["regions"]:
        regions[region["doc"]].append(region)
    plan = json.loads((run / "search_plan.json").read_text())
    store, screen = Store(run, "search"), Store(run, "screen")
    done = store.done()
    prefix = next((i for i in range(len(plan["units"])) if i not in done), len(plan["units"]))
    copies = defaultdict(list)  # searched span -> the screen rows of its copies
    for rep, items in plan.get("copies", {}).items():
        for shard, span in items:
            copies[rep].append((shard, span))
    by_shard = defaultdict(set)
    for items in copies.values():
        for shard, span in items:
            by_shard[shard].add(span)
    screened = {r["span_id"]: r for shard, spans in by_shard.items() for r in screen.read(shard, spans).to_pylist()}
    units = []
    for index in range(prefix):
        rows = {r["span_id"]: r for r in store.read(index).to_pylist()}
        units.append([_candidate(rows[span], [rows[span], *(screened[s] for _, s in copies.get(span, []))], regions)
                      for _, span in plan["units"][index] if span in rows])
    data = {"command": "python bench/budget/auto_budget.py record --work DIR (then extract, for a scan stopped early)",
            "scan_options": options or json.loads((run / "run_config.json").read_text())["config"].get("search", {}),
            "units_planned": len(plan["units"]), "units_recorded": prefix, "units": units}
    out.write_text(json.dumps(data, separators=(",", ":")) + "\n")
    return data


def _candidate(row: dict, holders: list[dict], regions: dict) -> dict:
    import library_figures as figures

    return {"span_id": row["span_id"], "status": row["status"], "steps": row["steps"] or 0,
            "search_s": round(row["search_s"] or 0.0, 3), "category": figures.category(row, regions),
            "spans": len(holders), "planted": sum(figures.category(h, regions).startswith("plant x") for h in holders),
            "greedy_match_rate": row["greedy_match_rate"]}


RULES = [(1, 8), (1, 16), (1, 32), (1, 64), (1, 128), (2, 64), (2, 128), (4, 128)]
STEPS_SHARES = (0.1, 0.25, 0.5)  # fixed steps budgets beside, as shares of the whole stretch's steps


def verdicts(units: list[list[dict]]) -> list[list[bool]]:
    return [[c["status"] == "memorized" for c in unit if c["status"] in ("memorized", "not_memorized")] for unit in units]


def stretch(units: list[list[dict]], upto: int, label: str, stop=None) -> dict:
    """What searching the first `upto` units gives, against searching all the recorded ones."""
    def totals(part: list[list[dict]]) -> dict:
        found = [c for unit in part for c in unit if c["status"] == "memorized"]
        return {"candidates": sum(len(u) for u in part), "steps": sum(c["steps"] for u in part for c in u),
                "search_s": sum(c["search_s"] for u in part for c in u), "memorized": len(found),
                "memorized_spans": sum(c["spans"] for c in found), "planted_spans": sum(c["planted"] for c in found)}
    got, whole = totals(units[:upto]), totals(units)
    return {"budget": label, "units": upto, **got, "missed_memorized": whole["memorized"] - got["memorized"],
            "missed_planted_spans": whole["planted_spans"] - got["planted_spans"],
            "steps_share": got["steps"] / whole["steps"] if whole["steps"] else None,
            "stop": None if stop is None else stop.to_json()}


def replay(data: dict) -> list[dict]:
    """Every rule of RULES and the fixed steps budgets over the recorded units (the scanner's own rules:
    measures/budget.py auto_stop and may_start)."""
    from scanner.measures import budget as bm

    units, out = data["units"], []
    judged = verdicts(units)
    for rule in RULES:
        stop = bm.auto_stop(judged, rule)
        out.append(stretch(units, len(units) if stop is None else stop.unit, f"auto:{rule[0]}/{rule[1]}", stop))
    total = sum(c["steps"] for u in units for c in u)
    for share in STEPS_SHARES:
        budget, spent, upto = bm.Budget("steps", round(total * share)), 0.0, 0
        while upto < len(units) and bm.may_start(spent, budget):
            spent += sum(c["steps"] for c in units[upto])
            upto += 1
        out.append(stretch(units, upto, f"{budget.amount:g}steps"))
    out.append(stretch(units, len(units), "all recorded"))
    return out


def replay_text(data: dict) -> str:
    rows = replay(data)
    head = ("| budget | units | candidates searched | GCG steps (share) | search s | memorized targets found "
            "(missed) | planted spans found (missed) | stopped at |")
    lines = [head, "|" + "---|" * 8]
    for r in rows:
        stop = r["stop"]
        where = "" if stop is None else f"unit {stop['unit']}: {stop['memorized']} of last {stop['window']}"
        lines.append(f"| {r['budget']} | {r['units']} | {r['candidates']} | {r['steps']} ({r['steps_share']:.2f}) | "
                     f"{r['search_s']:.0f} | {r['memorized']} ({r['missed_memorized']}) | {r['planted_spans']} "
                     f"({r['missed_planted_spans']}) | {where} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("--work", required=True)
    rec.add_argument("--candidates", type=int, default=320)
    rec.add_argument("--out", default=str(DATA))
    ext = sub.add_parser("extract")
    ext.add_argument("--run", required=True)
    ext.add_argument("--truth", required=True)
    ext.add_argument("--out", default=str(DATA))
    rep = sub.add_parser("replay")
    rep.add_argument("--data", default=str(DATA))
    args = parser.parse_args(argv)
    if args.what == "record":
        import logging

        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
        record(args.work, args.candidates, Path(args.out))
    elif args.what == "extract":
        extract(Path(args.run), Path(args.truth), Path(args.out))
    else:
        print(replay_text(json.loads(Path(args.data).read_text())))


if __name__ == "__main__":
    main()
