"""The family matrix (issue 26) on a device: each family's tiny random-weight model through the CLI.

    python bench/gpu/families.py --device cuda --dtype bfloat16 --vllm llama,qwen2 --out /tmp/fam   # GPU
    python bench/gpu/families.py --device cpu --dtype float32 --vllm none --out /tmp/fam            # CPU check

Per family (scanner/studies/families.py builds the model and its corpus, the model's own greedy
continuation generated on --device in --dtype, so the corpus holds what the model writes on that numeric
path) one JSON line per command:
- acr: `acr` on the continuation (its seed as natural prefix) and on word salad, at the defaults but a
  short search (SEARCH); memorized figures and seconds;
- scan: `scan` of the family's corpus (every phase; at most two searched candidates), rows by status,
  flagged documents (the continuations' own-0/own-1 and no control-*), seconds;
- acr_vllm (the families named in --vllm, where vLLM is installed): `acr --verify-engine vllm`.
HF commands run in this process (one import of torch for all); vLLM's in a subprocess of its own, as its
engine processes and memory are best given back whole. A command that fails is a row with its exit code
and the last line of its error; the script exits 1 if any row is not ok.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import subprocess
import sys
import time
from pathlib import Path

SEARCH = ["--steps", "10", "--candidates", "64", "--top-k", "64", "--restarts", "0"]


def run_cli(args: list[str]) -> tuple[int, str, str]:
    """`acr-scan ARGS` in this process: (exit code, stdout, stderr)."""
    from scanner.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    argv, sys.argv = sys.argv, ["acr-scan", *args]
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main()
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    finally:
        sys.argv = argv
    return code, out.getvalue(), err.getvalue()


def run_subprocess(args: list[str], timeout: int) -> tuple[int, str, str]:
    try:
        done = subprocess.run([sys.executable, "-m", "scanner", *args], capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124, "", f"timed out after {timeout}s"
    return done.returncode, done.stdout, done.stderr


def last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


def targets_file(model: Path) -> Path:
    own = json.loads((model / "family.json").read_text())["continuations"][0]
    path = model / "targets.jsonl"
    path.write_text(json.dumps({"text": own["text"], "natural_prefix": own["seed"]}) + "\n")
    return path


def acr_row(name: str, model: Path, device_args: list[str], runner, command: str) -> dict:
    from scanner.studies.families import control_text

    start = time.perf_counter()
    code, out, err = runner(["acr", "--model", str(model), "--file", str(targets_file(model)), control_text(),
                             "--json", *device_args, *SEARCH])
    row = {"family": name, "command": command, "rc": code, "seconds": round(time.perf_counter() - start, 2)}
    records = {r["target"]: r for r in map(json.loads, (x for x in out.splitlines() if x.startswith("{")))}
    own_text = json.loads(targets_file(model).read_text())["text"]
    if code != 0 or set(records) != {own_text, control_text()}:
        return {**row, "ok": False, "error": last_line(err)}
    own, control = records[own_text], records[control_text()]
    ok = bool(own["memorized"]) and not control["memorized"]
    return {**row, "ok": ok, "own_memorized": own["memorized"], "own_acr": own["acr"],
            "own_margin": own.get("generation_margin"), "control_memorized": control["memorized"],
            "verify_engine": own.get("verify_engine"), "bos": own.get("bos")}


def scan_row(name: str, model: Path, device_args: list[str], out: Path) -> dict:
    import pyarrow.parquet as pq

    start = time.perf_counter()
    run = out / f"{name}-run"
    code, _, err = run_cli(["scan", str(model / "corpus.parquet"), "--model", str(model), "--out", str(run),
                            *device_args, *SEARCH, "--max-candidates", "2"])
    row = {"family": name, "command": "scan", "rc": code, "seconds": round(time.perf_counter() - start, 2)}
    if code != 0:
        return {**row, "ok": False, "error": last_line(err)}
    rows = pq.read_table(run / "results").to_pylist()
    flagged = sorted({r["doc_id"] for r in rows if r["memorized"]})
    statuses: dict[str, int] = {}
    for r in rows:
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
    return {**row, "ok": flagged == ["own-0", "own-1"], "flagged_docs": flagged, "statuses": statuses,
            "passages": (run / "passages.parquet").is_file()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--families", default="all", help="comma-separated names, or all")
    parser.add_argument("--vllm", default="llama,qwen2", help="families also verified by vLLM; none or all")
    parser.add_argument("--vllm-timeout", type=int, default=120)
    parser.add_argument("--out", default="bench_out/families")
    args = parser.parse_args()

    from scanner.studies.families import FAMILIES, build_families

    names = tuple(FAMILIES) if args.families == "all" else tuple(args.families.split(","))
    out = Path(args.out)
    start = time.perf_counter()
    dirs = build_families(out / "models", names, device=args.device, dtype=args.dtype)
    print(json.dumps({"command": "build", "families": list(names), "seconds": round(time.perf_counter() - start, 2),
                      "device": args.device, "dtype": args.dtype}), flush=True)
    device_args = ["--device", args.device, "--dtype", args.dtype]
    wanted = () if args.vllm == "none" else names if args.vllm == "all" else tuple(args.vllm.split(","))
    has_vllm = importlib.util.find_spec("vllm") is not None
    rows = []
    for name in names:
        mine = [acr_row(name, dirs[name], device_args, run_cli, "acr"), scan_row(name, dirs[name], device_args, out)]
        if name in wanted and has_vllm:
            runner = lambda a: run_subprocess(a, args.vllm_timeout)  # noqa: E731
            mine.append(acr_row(name, dirs[name], [*device_args, "--verify-engine", "vllm"], runner, "acr_vllm"))
        elif name in wanted:
            mine.append({"family": name, "command": "acr_vllm", "ok": None, "skipped": "vLLM not installed"})
        for row in mine:
            print(json.dumps(row), flush=True)
        rows += mine
    failed = [f"{r['family']}:{r['command']}" for r in rows if r["ok"] is False]
    print(json.dumps({"command": "summary", "rows": len(rows), "failed": failed,
                      "seconds": round(time.perf_counter() - start, 2)}), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
