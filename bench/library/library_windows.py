"""The library's screen alone under each window mode: recall of the plants and the screen's cost.

    python bench/library/library_windows.py --work DIR [--out bench/library/windows.json]

DIR is bench/library/library.py's --work (its whole library's corpus and model are reused, not rebuilt). Each
mode scans the whole library with the benchmark's options and `--max-candidates 0` (screen and
certificates, no GCG), so what it measures is what the screen hands to the search:
- exact: one [context][span] row per span (the release before's windows);
- stream: the default, chunks up to --chunk-tokens (1024), capped at the model's positions (256 here);
- stream-128: chunks of 128 tokens, the length of the rows the library's model was trained on.
Per mode: the planted passages' copies and spans found (candidates, settled by certificate), the
certificates and candidates of the whole library, the screen's and certify's work seconds, the tokens
forwarded per corpus token, the wall time and the peak memory of the scan.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parent)]

import library_figures as figures  # noqa: E402
import library_scan as commands  # noqa: E402
from library import SCAN  # noqa: E402

MODES = {"exact": ["--screen-window", "exact"], "stream": ["--screen-window", "stream"],
         "stream-128": ["--screen-window", "stream", "--chunk-tokens", "128"]}


def screen_only(corpus: Path, model: Path, out: Path, mode: list[str], logs: Path) -> dict:
    timed = commands.run(commands.cli("scan", str(corpus), "--model", str(model), "--out", str(out), *SCAN,
                                      "--seed", "0", "--max-candidates", "0", *mode), logs / f"{out.name}.log")
    cost = commands.status(out)["cost"]
    return {"wall_s": timed["wall_s"], "peak_rss_mb": timed["rss"]["driver"]["peak_rss_mb_max"],
            "screen_s": round(cost["screen"]["seconds"], 1), "certify_s": round((cost["certify"] or {}).get("seconds", 0), 1),
            "reencoding": round(cost["screen"]["reencoding"], 3), "candidates": cost["screen"]["candidates"],
            "certificates": (cost["certify"] or {}).get("settled", 0)}


def planted(run: Path, truth: dict) -> dict:
    table = figures.rows(run)
    figures.by_category(table, truth)  # labels each row's category, which recall reads
    recall = figures.recall(table, truth)
    return {count: {k: r[k] for k in ("copies", "copies_found", "spans", "candidates", "memorized")}
            for count, r in recall.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", required=True, help="bench/library/library.py's --work (the whole library is reused)")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "windows.json"))
    args = parser.parse_args()
    work = Path(args.work).resolve() / "full"
    corpus, model = work / "f1.00" / "corpus.parquet", work / "library" / "model"
    truth = json.loads((work / "library" / "truth.json").read_text())
    logs = work / "windows"
    logs.mkdir(exist_ok=True)
    record = {}
    for name, mode in MODES.items():
        run = logs / f"run-{name}"
        shutil.rmtree(run, ignore_errors=True)  # a fresh scan each time: its wall time is the figure
        record[name] = {**screen_only(corpus, model, run, mode, logs), "planted": planted(run, truth)}
        print(json.dumps({name: record[name]}), flush=True)
    Path(args.out).write_text(json.dumps({"options": [*SCAN, "--max-candidates", "0"], "modes": record}, indent=1) + "\n")


if __name__ == "__main__":
    main()
