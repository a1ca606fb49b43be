"""What the commands print: records as a table or JSON lines, the one-line summaries of a scan and of
its calibration. Its own module so that the commands (main.py) and the demo share it without the demo
importing the command group."""

from __future__ import annotations

import json
import re
from pathlib import Path

import click

# Characters a terminal acts on instead of showing: every C0 control (newline and tab included: a doc_id
# holding "\nMATCH ..." printed raw forges a line of the verdict), DEL, C1 (0x9b is a CSI of its own), and
# the bidirectional overrides that reorder a line. Ids, file names and prompts come from a corpus or a
# bundle anyone can write; printed raw, ESC]0;...BEL retitles the terminal and ESC[2J clears it. click
# strips CSI colours when piped, never OSC, and never on a terminal.
UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def terminal_safe(text: str) -> str:
    """`text` with every character a terminal would act on written as a visible escape (\\x1b, \\n,
    \\u202e): one line, whatever it holds."""
    return UNSAFE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), str(text))


def echo(text: str, err: bool = False) -> None:
    """click.echo of one line that may hold what others wrote (ids, names): made terminal-safe first, so
    a newline in it is shown, not obeyed (a message of several lines is several calls)."""
    click.echo(terminal_safe(text), err=err)


def emit_records(records, as_json: bool) -> None:
    """Stream results as they come: JSON lines, or a table with a summary at the end."""
    from scanner.cli import table

    done = []
    for record in records:
        if as_json:
            click.echo(json.dumps(record))
        else:
            if not done:
                click.echo(table.header(record))
            echo(table.row(record, len(done) + 1))  # the text and prompt are the user's or the model's
        done.append(record)
    if not as_json:
        click.echo(table.summary(done))


def summary_line(stats: dict, out: str) -> str:
    counts = ", ".join(f"{k} {v}" for k, v in sorted(stats.get("status_counts", {}).items()))
    return (
        f"{stats.get('spans', 0)} spans in {stats.get('shards_done', 0)}/{stats.get('shards_total', 0)} "
        f"shards ({counts}); results in {Path(out) / 'results'}"
    )


def audit_line(out: str) -> str | None:
    """What the recall audit did, after the scan's summary: its searches and the recall they state, or
    why there were none; None for a run that never reached the audit (or --audit-sample 0)."""
    from scanner.storage.records import AUDIT_DRAW, RECALL, read_record
    from scanner.storage.rundir import AUDIT_PLAN, RECALL_FILE

    plan = read_record(Path(out) / AUDIT_PLAN, AUDIT_DRAW, quiet=True) or {}
    recall = read_record(Path(out) / RECALL_FILE, RECALL, quiet=True) or {}
    if not plan:
        return None
    if not plan.get("size"):
        return (
            f"recall audit: none drawn, no recall stated (--audit-sample {plan.get('sample')}: {plan.get('why')}); "
            "--audit-sample N asks for N searches"
        )
    if not recall:
        return f"recall audit: {plan.get('size')} searches drawn, none committed yet"
    said = recall.get("recall")
    stated = (
        f"recall {said:.0%} ({recall['recall_low']:.0%} to {recall['recall_high']:.0%})"
        if said is not None
        else "no recall in all (a stratum had no draw)"
    )
    return (
        f"recall audit: {recall.get('drawn')} searched (--audit-sample {plan.get('sample')}), "
        f"{recall.get('hits')} memorized; {stated}; recall.json"
    )


def calibration_line(table) -> str:
    """The paper's and the calibrated count side by side (export, report, verify)."""
    from scanner.measures import calibration as calibrate

    columns = [c for c in ("memorized", "calibrated_memorized", "predictable") if c in table.column_names]
    return calibrate.counts_line(calibrate.counts(table.select(columns).to_pylist()))


def run_summary(run) -> dict:
    config = run.saved_config()
    status = run.status()
    return {
        "model": config["config"]["model"]["model"],
        "corpus": config["config"]["corpus"]["path"],
        "shards": f"{status['shards_done']}/{status['shards_total']}",
        "spans": status["rows"],
        **{f"{k} spans": v for k, v in sorted(status["status_counts"].items())},
        "work time (s)": round(status["elapsed_s"] or 0.0, 1),
    }


def work_text_tokens(run) -> int:
    """k of the run's prompt_source verdicts (--work-text-tokens; a run saved before it had the default)."""
    from scanner.cli.options import default_of
    from scanner.config import ScanConfig

    return run.saved_config()["config"].get("work_text_tokens", default_of(ScanConfig, "work_text_tokens"))
