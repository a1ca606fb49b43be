"""One screened window searched at the decision length at once, without the fast schedule's probe at 5
tokens (issue 37 item 2: what the probe costs a partly memorized passage on real weights).

    python bench/validity/decide_at_once.py --run RUN --span SPAN_ID --model W/model --steps 20 [--no-reject]

RUN is a scan's folder (its screen/ holds the window's text), SPAN_ID the window. Prints the window and
then the verdict, the steps searched and the seconds, as JSON lines.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def window_text(run: Path, span: str) -> dict:
    import pyarrow.parquet as pq

    for part in sorted((run / "screen").glob("part-*.parquet")):
        for row in pq.read_table(part, columns=["span_id", "text", "greedy_match_rate"]).to_pylist():
            if row["span_id"] == span:
                return row
    raise SystemExit(f"--span {span}: no such window in {run}/screen; pick one from its results table")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, required=True)
    parser.add_argument("--span", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--no-reject", action="store_true", help="search every step (no early rejection)")
    args = parser.parse_args()
    from scanner.config import ModelConfig, PromptConfig, SearchConfig
    from scanner.run.measure import measure_many

    row = window_text(args.run, args.span)
    print(json.dumps(row), flush=True)
    search = SearchConfig(probe_length=0, decide_steps=args.steps, restarts=0, verdict_only=True,
                          early_reject=not args.no_reject)
    start = time.perf_counter()
    record = next(measure_many(ModelConfig(model=args.model, device="cpu"), PromptConfig(), search,
                               [{"text": row["text"]}]))
    keys = ("target_tokens", "prompt_tokens", "acr", "memorized", "steps", "prompt")
    print(json.dumps({**{k: record.get(k) for k in keys}, "seconds": round(time.perf_counter() - start, 1)}))


if __name__ == "__main__":
    main()
