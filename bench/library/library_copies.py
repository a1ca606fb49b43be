"""Issue 31 on the library benchmark: books flagged, shared text found and recall of the planted copies,
for the scanner of any checkout (this one, or its parent for "before"), one scan each.

    python bench/library/library_copies.py --work DIR [--fraction 0.25] [--code CHECKOUT] [--label after]
                                   [--before CHECKOUT] [--figures-only]

Builds or reuses the library benchmark's corpus and model (bench/library/library.py's "full" size: a header
every document opens with, passages planted 1, 2, 4, 8 and 32 times at the middle of distinct documents,
a tiny Llama trained on them), takes the seeded share of its documents, ingests and scans them with
bench/library/library.py's options and one searched candidate a document (--max-candidates), builds the report,
and prints: documents with a memorized span, documents with a passage of their own (not shared text),
the shared texts, and per duplication count the planted copies covered at 60 % or more of their
characters by memorized spans, those covered whole (99 %), and the mean share covered. `--code`: the
checkout whose scanner runs (its folder is the working directory and PYTHONPATH of every command), so the
same script measures before and after. `--before`: a second checkout scanned right after, on the same
corpus and model (built once: the library is built from this machine's installed files, so two
invocations may not build the same one), with its own label. `--figures-only`: no scan, the figures of
the runs already in WORK.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parent)]

import library as bench  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

COVERED = 0.6  # a planted copy counts as found when memorized spans cover this share of its characters
WHOLE = 0.99  # ... and as found whole at this share (a window's ragged edge may miss a character or two)


def acr_scan(code: Path, log: Path, *args: str) -> float:
    start = time.perf_counter()
    with open(log, "w") as out:
        subprocess.run([sys.executable, "-m", "scanner", *args], cwd=code, stdout=out, stderr=subprocess.STDOUT,
                       env={**os.environ, "PYTHONPATH": str(code), "OMP_NUM_THREADS": "1"}, check=True)
    return round(time.perf_counter() - start, 1)


def covered(spans: list[tuple[int, int]], start: int, end: int) -> float:
    """Share of [start, end) inside the union of `spans`."""
    at, inside = start, 0
    for a, b in sorted(spans):
        a, b = max(a, at), min(b, end)
        if b > a:
            inside += b - a
            at = b
    return inside / max(end - start, 1)


def recall(rows: list[dict], truth: dict) -> dict:
    spans = defaultdict(list)
    for r in rows:
        if r["status"] == "memorized":
            spans[int(r["doc_id"][:4])].append((r["char_start"], r["char_end"]))
    scanned = {int(r["doc_id"][:4]) for r in rows}
    out = defaultdict(lambda: {"copies": 0, "covered": 0, "whole": 0, "touched": 0, "share_sum": 0.0})
    for region in truth["regions"]:
        if region["kind"] != "plant" or region["doc"] not in scanned:
            continue
        share = covered(spans[region["doc"]], region["start"], region["end"])
        c = out[f"x{region['count']}"]
        c["copies"] += 1
        c["covered"] += share >= COVERED
        c["whole"] += share >= WHOLE
        c["share_sum"] += share
        c["touched"] += share > 0
    for c in out.values():
        c["mean_share"] = round(c.pop("share_sum") / c["copies"], 3)
    return dict(sorted(out.items(), key=lambda kv: int(kv[0][1:])))


def figures(run: Path, truth: dict) -> dict:
    rows = pq.read_table(run / "results").to_pylist()
    passages = pq.read_table(run / "passages.parquet").to_pylist()
    shared = [p for p in passages if p.get("shared_text")]
    for p in shared:  # the report's grouping (results/report_shared.py): by the text of the most-held span
        p["core"] = max((r for r in rows if r["span_id"] in set(p["span_ids"])),
                        key=lambda r: r["copies_in_corpus"] or 0)["text"]
    texts = defaultdict(set)
    for p in shared:
        texts[p["core"]].add(p["doc_row"])
    return {"documents": len({r["doc_id"] for r in rows}),
            "documents_with_a_memorized_span": len({r["doc_id"] for r in rows if r["status"] == "memorized"}),
            "documents_with_own_passages": len({p["doc_id"] for p in passages if not p.get("shared_text")}),
            "shared_texts": [{"documents": len(d), "chars": len(t), "text": t[:60]} for t, d in texts.items()],
            "copies_given_at_other_offsets": sum(1 for r in rows if r.get("searched_as") and r["steps"] == 0
                                                 and r["status"] == "memorized"),
            "searched": sum(r["status"] in ("memorized", "not_memorized") and not r.get("searched_as") for r in rows),
            "recall_at_60pct": recall(rows, truth)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", required=True)
    parser.add_argument("--fraction", type=float, default=0.25)
    parser.add_argument("--code", default=str(Path(__file__).resolve().parents[2]))
    parser.add_argument("--label", default="after")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--before", default=None, help="a second checkout, scanned on the same corpus and model")
    parser.add_argument("--figures-only", action="store_true",
                        help="no scan: the figures of the runs these labels left in WORK (after a change of figures)")
    args = parser.parse_args()
    work, _, truth, _ = bench.build(args, "full")
    names = json.loads((work / "library" / "truth.json").read_text())["names"]
    docs = bench.subset(work, names, args.fraction, args.seed, f"copies-f{args.fraction:.2f}")
    runs = [(args.label, args.code), *([("before", args.before)] if args.before else [])]
    if args.figures_only:
        print(json.dumps([{"label": label, **figures(docs.parent / f"run-{label}", truth)} for label, _ in runs], indent=1))
        return
    print(json.dumps([one(work, docs, truth, label, Path(code).resolve()) for label, code in runs], indent=1))


def one(work: Path, docs: Path, truth: dict, label: str, code: Path) -> dict:
    """One checkout's ingest, scan and report of the documents, and its figures."""
    folder = docs.parent
    logs = folder / f"logs-{label}"
    logs.mkdir(exist_ok=True)
    corpus, run = folder / f"corpus-{label}.parquet", folder / f"run-{label}"
    subprocess.run(["rm", "-rf", str(run), str(corpus)], check=True)
    acr_scan(code, logs / "ingest.log", "ingest", str(docs), "--out", str(corpus))
    count = len(list(docs.iterdir()))
    options = [*bench.SCAN, "--max-candidates", str(math.ceil(count * bench.CANDIDATES_PER_DOC))]
    scan_s = acr_scan(code, logs / "scan.log", "scan", str(corpus), "--model", str(work / "library" / "model"),
                      "--out", str(run), *options)
    report_s = acr_scan(code, logs / "report.log", "report", str(run), "--out", str(folder / f"report-{label}.html"))
    return {"label": label, "code": str(code), "scan_s": scan_s, "report_s": report_s, **figures(run, truth)}


if __name__ == "__main__":
    main()
