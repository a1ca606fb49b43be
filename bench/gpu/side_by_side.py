"""gpu_check.sh's figures of the GCG step and the screen, one row per shape, so SmolLM2-135M's shape reads
beside the 1B and 8B ones. Reads the steps' JSON lines under OUT; a step that wrote none leaves blanks.

    python bench/gpu/side_by_side.py OUT smollm2 gcg_step,screen_8b          # a table
    python bench/gpu/side_by_side.py --json OUT smollm2 gcg_step,screen_8b   # the same rows as one JSON list

Each GROUP is a comma-separated list of steps whose rows merge by shape; a row is labelled by its shape
and group, so a shape timed by two groups (the rehearsal times "tiny" in all of them) stays two rows.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

COLUMNS = {  # column: (source bench, setting or None, field, header, format)
    "gcg_s_per_step_ours": ("gcg_step", None, "s_per_step_ours", "GCG s/step", "{:.3f}"),
    "gcg_s_per_step_plain_hf": ("gcg_step", None, "s_per_step_plain_hf", "plain HF", "{:.3f}"),
    "gcg_pct_floor_ours": ("gcg_step", None, "pct_floor_ours", "% floor", "{:.0f}"),
    "screen_tokens_per_s": ("screen", "default", "corpus_tokens_per_s", "screen tok/s", "{:,.0f}"),
    "pass_tokens_per_s": ("screen", "teacher-forced pass", "corpus_tokens_per_s", "1 pass tok/s", "{:,.0f}"),
    "screen_vs_pass": ("screen", "default", "ratio_to_teacher_forced", "screen/pass", "{:.2f}"),
}


def figure_rows(out: Path, step: str) -> list[dict]:
    """The step's JSON figure lines; a line that is not JSON (a log line starting with '{') is skipped."""
    path, rows = out / f"{step}.jsonl", []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def group_rows(out: Path, group: str) -> list[dict]:
    by_shape: dict[str, dict] = {}
    for fig in (f for step in group.split(",") for f in figure_rows(out, step)):
        shape = fig.get("shape", "?")
        for column, (bench, setting, field, _, _) in COLUMNS.items():
            if fig.get("bench") == bench and setting in (None, fig.get("setting")) and field in fig:
                by_shape.setdefault(shape, {"shape": shape, "steps": group})[column] = fig[field]
    return [{column: row.get(column) for column in ("shape", "steps", *COLUMNS)} for row in by_shape.values()]


def table(rows: list[dict]) -> str:
    lines = [f"{'shape (steps)':<30}" + "".join(f"{header:>14}" for *_, header, _ in COLUMNS.values())]
    for row in rows:
        cells = ("-" if row[c] is None else fmt.format(row[c]) for c, (*_, fmt) in COLUMNS.items())
        lines.append(f"{row['shape'] + ' (' + row['steps'] + ')':<30}" + "".join(f"{v:>14}" for v in cells))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("out", type=Path)
    parser.add_argument("groups", nargs="+")
    args = parser.parse_args()
    rows = [row for group in args.groups for row in group_rows(args.out, group)]
    print(json.dumps(rows) if args.json else table(rows))


if __name__ == "__main__":
    main()
