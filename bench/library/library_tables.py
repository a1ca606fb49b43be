"""Markdown tables of the library benchmark's JSON records (bench/library/library.py), for
bench/library/RESULTS.md.

    python bench/library/library_tables.py bench/library/full-f1.00.json [bench/library/full-f0.25.json]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

PHASES = ("screen", "certify", "search", "tighten", "write", "passages", "exit")


def _row(cells) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _table(head: list[str], rows: list[list]) -> str:
    return "\n".join([_row(head), "|" + "---|" * len(head), *(_row(r) for r in rows)])


def _mb(rss: dict, group: str) -> str:
    peak = rss.get(group)
    return "-" if not peak else f"{peak['peak_rss_mb_max']:,.0f}" + (f" (x{peak['processes']})" if peak["processes"] > 1 else "")


def phases(record: dict) -> str:
    rows = []
    for name, run in record["runs"].items():
        walls = run["phases_wall_s"]
        rows.append([f"{name} (f {record['fraction']:g})", *(f"{walls.get(p, 0):.1f}" for p in PHASES),
                     f"{run['wall_s']:.1f}", _cpu(run["rss"]), _mb(run["rss"], "driver"), _mb(run["rss"], "ray_workers"),
                     _mb(run["rss"], "ray_services"), f"{run['kernel_maxrss_mb']:,.0f}",
                     f"{run.get('load_average', [0])[0]:.1f}"])
    return _table(["scan", *(f"{p} s" for p in PHASES), "total s", "CPU s (driver / workers)", "driver peak MB",
                   "Ray workers peak MB", "Ray services peak MB", "kernel peak MB", "load (1 min)"], rows)


def _cpu(rss: dict) -> str:
    cells = [f"{rss[g]['cpu_s']:.0f}" for g in ("driver", "ray_workers") if g in rss and "cpu_s" in rss[g]]
    return " / ".join(cells) or "-"


def shares(record: dict) -> str:
    cost = record["runs"]["local"]["cost"]
    screen, search = cost["screen"], cost["search"]
    certify = cost["certify"] or {"seconds": 0, "settled": 0, "settled_share": 0.0}
    work = screen["seconds"] + (certify["seconds"] or 0) + search["unit_seconds"]
    rows = [["corpus tokens", f"{screen['corpus_tokens']:,}"], ["spans (anchored included)", f"{screen['spans']:,}"],
            ["tokens forwarded / corpus tokens (re-encoding)", f"{screen['reencoding']:.2f}"],
            ["candidate share of spans", f"{screen['candidate_share']:.4f}"],
            ["candidates settled by a certificate", f"{certify['settled']:,} ({certify['settled_share']:.4f} of candidates)"],
            ["candidates searched (GCG)", f"{search['candidates']:,}"],
            ["shrinking share of search steps", _fmt(search.get("shrinking_share_of_steps"))],
            ["screen / certify / search work s", f"{screen['seconds']:.0f} / {certify['seconds']:.0f} / {search['unit_seconds']:.0f}"],
            ["verification s (share of work)", f"{cost['verification']['seconds']:.0f} ({cost['verification']['seconds'] / work:.2f})"],
            ["calibration s (share of work)", f"{cost['calibration']['seconds']:.0f} ({cost['calibration']['seconds'] / work:.2f})"],
            ["passage extension s", _fmt((cost.get("passages") or {}).get("extend_s"))]]
    for outcome, spent in search["outcomes"].items():
        if spent["candidates"]:
            per = spent["per_candidate"]
            rows.append([f"searched {outcome}", f"{spent['candidates']} ({per['steps']:.1f} steps, {per['seconds']:.2f} s each)"])
    return _table(["measured (local run)", "value"], rows)


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


def recall(record: dict) -> str:
    rows = [[count, r["copies"], r["copies_found"], r["spans"], r["candidates"], r["memorized"], _fmt(r["recall"]),
             _fmt(r["recall_of_candidates"])] for count, r in record["recall"].items()]
    return _table(["planted", "copies", "copies with a memorized span", "spans inside", "candidates", "memorized",
                   "recall", "recall of candidates"], rows)


def categories(record: dict) -> str:
    keys = ("spans", "candidates", "searched", "memorized", "by_certificate", "calibrated_memorized", "not_searched")
    rows = [[name, *(c.get(k, 0) for k in keys)] for name, c in record["categories"].items()]
    return _table(["category", *keys], rows)


def power(record: dict) -> str:
    stats = ("greedy_match_rate", "pz_greedy", "log10_pz_topk", "-mean_nll", "-certificate_tokens")
    rows = [[name, p["n"], p["memorized"], *(_fmt(p.get(s)) for s in stats)] for name, p in record["predictive_power"].items()]
    return _table(["over", "n", "memorized", *stats], rows)


def early_reject(record: dict) -> str:
    er = record.get("early_reject")
    if not er:
        return "(no trajectories recorded)"
    rows = []
    for name, j in er.items():
        if isinstance(j, dict) and "rule" in j:
            rows.append([name, f"after {j['rule']['after']}, min_right {j['rule']['min_right']}",
                         f"{j['memorized_kept']}/{j['memorized_full']}", j["not_memorized"],
                         f"{j['steps_before']} -> {j['steps_after']}", _fmt(j["factor"])])
    return _table(["judged", "rule", "recall", "not memorized", "steps", "factor"], rows)


def growth(record: dict) -> str:
    g = record.get("growth_from_quarter")
    if not g:
        return "(no quarter record)"
    return _table(["figure", "quarter", "whole", "whole / quarter"],
                  [[k, v["quarter"], v["whole"], _fmt(v["ratio"])] for k, v in g.items()])


def plan(record: dict) -> str:
    """The plans beside the whole library's scans (bench/library/library_figures.py plan_against): one line per
    design and seed, then each plan's figures."""
    checks = (record.get("plan_checks") or {}).get("plans")
    if not checks:
        return "(no plan recorded)"
    rows = [[pl["design"], pl["seed"], f"{pl['plan_wall_s']:.0f} ({pl['plan_share_of_local_wall']:.2f})",
             f"{_fmt(pl['wall_local']['predicted'])} ({_fmt(pl['wall_local']['low'])} .. {_fmt(pl['wall_local']['high'])})",
             _fmt(pl["wall_local"]["actual"]), _fmt(pl["wall_local"]["ratio"]),
             _fmt(pl["figures"]["search_s_under_caps"]["ratio"])] for pl in checks]
    summary = _table(["design", "seed", "plan s (share of the scan)", "projected wall s (range)", "measured",
                      "projected / measured", "search s projected / measured"], rows)
    return "\n\n".join([summary, *(_plan(pl) for pl in checks)])


def _plan(pl: dict) -> str:
    cells = [("wall time, local", pl["wall_local"])]
    if "wall_ray" in pl:
        cells.append(("wall time, Ray (2 workers x 0.85)", pl["wall_ray"]))
    cells += list(pl["figures"].items())
    rows = [[name, _fmt(f["predicted"]), f"{_fmt(f['low'])} .. {_fmt(f['high'])}", _fmt(f["actual"]), _fmt(f["ratio"]),
             _fmt(f["in_range"])] for name, f in cells]
    s = pl["sample"]
    head = (f"{pl.get('design', 'documents')} (seed {pl.get('seed', 0)}): screened {s['documents']} of {s['of']} documents, "
            f"{s['tokens']:,} tokens, searched {s.get('drawn')} of {s.get('population')} ({s['caps']}); the plan took "
            f"{pl['plan_wall_s']:.0f} s, {pl['plan_share_of_local_wall']:.2f} of the local scan's wall time\n\n")
    return head + _table(["figure", "projected", "range", "measured", "projected / measured", "in range"], rows)


def main(paths: list[str]) -> None:
    for path in paths:
        record = json.loads(Path(path).read_text())
        print(f"## {path}\n")
        for part in (phases, shares, recall, categories, power, early_reject, growth, plan):
            print(part(record), end="\n\n")
        print(json.dumps({k: record.get(k) for k in ("flagged_elsewhere", "identical", "ray_vs_local", "wall_s",
                                                       "bench_peak_rss_mb")}, indent=1))
        model = record.get("scale_model") or {}
        print(model.get("as_run", ""), model.get("books_h200", ""), json.dumps(model.get("budget")), sep="\n\n")


if __name__ == "__main__":
    main(sys.argv[1:])
