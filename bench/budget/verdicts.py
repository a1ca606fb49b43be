"""Verdicts first, identical spans once: the same scan by the release before them and by this tree, side by side.

    python bench/budget/verdicts.py --before bf8b10e --corpus C.parquet --model M --out verdicts.json [--budget 2000steps]
        [-- SCAN OPTIONS...]

`--before REV` is checked out into a temporary git worktree; each scan runs in its own tree (cwd and
PYTHONPATH); both get the same corpus, model and scan options (after `--`) and run at the same time, so
each sees the same machine load (the wall seconds are of two scans sharing the machine). From each run directory (done markers' mtimes, the units' stats, the results table):
- seconds from the scan's start (plan.json) until every candidate has its verdict: the last certify or
  search unit's commit (a search unit of the release before also shrinks; this tree's only decides, and
  tighten units shrink after). None when the budget left candidates undecided (not_searched);
- seconds until the search phase ended (the last unit of any kind), and the whole scan;
- searches (spans a search or tighten unit ran on, each counted once), their GCG steps and seconds;
- candidates left not_searched, spans memorized, and rows that took their verdict from a copy.
The verdicts of the two tables are compared span by span (memorized or not, where both decided).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[2]


def scan(tree: Path, corpus: str, model: str, out: Path, options: list[str]) -> subprocess.Popen:
    """Start `acr-scan scan` from `tree`: run there, since `python -m` puts the working directory
    first on sys.path (ahead of PYTHONPATH's tree and of an editable install's finder)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [sys.executable, "-m", "scanner", "scan", corpus, "--model", model, "--out", str(out), *options]
    log = open(out.parent / f"{out.name}.log", "w")  # noqa: SIM115 - a file, not a pipe that could fill and block
    return subprocess.Popen(command, env=env, cwd=tree, stdout=subprocess.DEVNULL, stderr=log, text=True)


def scan_both(trees: dict[str, Path], corpus: str, model: str, runs: dict[str, Path], options: list[str]) -> dict:
    """Both scans at once, so each sees the same machine load throughout; their wall seconds."""
    start = time.perf_counter()
    procs = {name: scan(trees[name], corpus, model, runs[name], options) for name in trees}
    walls = {}
    while len(walls) < len(procs):  # each scan's own end
        for name, proc in procs.items():
            if name not in walls and proc.poll() is not None:
                walls[name] = time.perf_counter() - start
                if proc.returncode != 0:
                    log = runs[name].parent / f"{runs[name].name}.log"
                    raise SystemExit(f"scan from {trees[name]} failed:\n{log.read_text()[-3000:]}")
        time.sleep(0.5)
    return walls


def _marker_times(run: Path, store: str) -> list[float]:
    folder = run / store / "done"
    return sorted(p.stat().st_mtime for p in folder.iterdir()) if folder.is_dir() else []


def _stats(run: Path, store: str) -> list[dict]:
    folder = run / store / "stats"
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))] if folder.is_dir() else []


def figures(run: Path, wall_s: float) -> dict:
    """What the module docstring lists, read from one run directory."""
    start = (run / "plan.json").stat().st_mtime
    rows = pq.read_table(run / "results").to_pylist()
    undecided = sum(r["status"] == "not_searched" for r in rows)
    deciding = _marker_times(run, "certify") + _marker_times(run, "search")
    searching = deciding + _marker_times(run, "tighten")
    units = _stats(run, "search") + _stats(run, "tighten")
    searched = {r["span_id"] for r in rows if (r["steps"] or 0) > 0}
    return {"wall_s": wall_s, "verdicts_s": None if undecided or not deciding else max(deciding) - start,
            "search_end_s": max(searching) - start if searching else None,
            "searches": len(searched), "search_units": len(units),
            "steps": sum(s.get("steps", 0) for s in units), "search_s": sum(s.get("search_s", 0.0) for s in units),
            "candidates": sum(r["status"] in ("memorized", "not_memorized", "failed", "not_searched") for r in rows),
            "not_searched": undecided, "memorized": sum(r["status"] == "memorized" for r in rows),
            "copies": sum(r.get("searched_as") is not None for r in rows),
            "decision_bound": sum(r.get("acr_kind") == "decision_bound" for r in rows)}


def agreement(before: Path, after: Path) -> dict:
    """Spans both runs decided, and those whose memorized verdicts agree."""
    def verdicts(run: Path) -> dict:
        table = pq.read_table(run / "results", columns=["span_id", "status", "memorized"]).to_pylist()
        return {r["span_id"]: r["memorized"] for r in table if r["status"] in ("memorized", "not_memorized")}

    old, new = verdicts(before), verdicts(after)
    both = old.keys() & new.keys()
    return {"decided_by_both": len(both), "agree": sum(old[s] == new[s] for s in both),
            "memorized_only_before": sorted(s for s in both if old[s] and not new[s]),
            "memorized_only_after": sorted(s for s in both if new[s] and not old[s])}


def main(argv: list[str] | None = None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    options = argv[argv.index("--") + 1:] if "--" in argv else []
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="git revision of the release to compare with")
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--budget", default=None, help="--search-budget of both scans (default: none)")
    parser.add_argument("--out", default=None, help="write the JSON record here too")
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    options += ["--search-budget", args.budget] if args.budget else []
    with tempfile.TemporaryDirectory(prefix="verdicts-") as tmp:
        tree = Path(tmp) / "before"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), args.before],
                       check=True, capture_output=True)
        try:
            runs = {name: Path(tmp) / f"run-{name}" for name in ("before", "after")}
            corpus, model = str(Path(args.corpus).resolve()), str(Path(args.model).resolve())
            walls = scan_both({"before": tree, "after": ROOT}, corpus, model, runs, options)
            record = {"command": " ".join(["python bench/budget/verdicts.py", *argv]), "before": args.before,
                      "date": time.strftime("%Y-%m-%d"), "options": options,
                      **{name: figures(runs[name], walls[name]) for name in runs},
                      "verdicts": agreement(runs["before"], runs["after"])}
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], capture_output=True)
    text = json.dumps(record, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return record


if __name__ == "__main__":
    main()
