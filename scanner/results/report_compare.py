"""The comparison page of `acr-scan compare` (RUN_B/compare.parquet) and its export: counts per verdict
class, the paired ACR plot (A on x, B on y, the diagonal and tau drawn), and each pair's prompts. One
self-contained HTML file (inline CSS and SVG, no script); every text from the corpus, the prompts and the
model names is escaped. An export carries both models' identities beside the rows (OUT.models.json)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from scanner.errors import require
from scanner.measures.compare import CLASSES
from scanner.results.export import WRITERS
from scanner.results.html_format import esc as _e
from scanner.results.html_format import num as _num
from scanner.storage.atomic import atomic_write, atomic_write_bytes, atomic_write_json

IDENTITY, TABLE, SUMMARY = "compare.json", "compare.parquet", "compare_summary.json"
COLORS = {
    "still_memorized": "#d9480f",
    "forgotten_by_completion_still_compressible": "#9c36b5",
    "forgotten": "#2b8a3e",
    "completion_only": "#e67700",
    "newly_memorized": "#1971c2",
    "not_memorized": "#8fa3bf",
    "failed": "#495057",
}
W, H, PAD = 520, 520, 56


def is_comparison(folder: str | Path) -> bool:
    return (Path(folder) / IDENTITY).is_file()


def read_compare(folder: str | Path) -> tuple[pa.Table, dict]:
    """A finished comparison's table and summary (InputError naming the fix if it is unfinished)."""
    folder = Path(folder)
    require(
        (folder / TABLE).is_file() and (folder / SUMMARY).is_file(),
        f"the comparison in '{folder}' is "
        f"unfinished (no {TABLE}); relaunch the same `acr-scan compare` command to finish it",
    )
    return pq.read_table(folder / TABLE), json.loads((folder / SUMMARY).read_text(encoding="utf-8"))


def _xy(value: float, top: float) -> float:
    return PAD + value / top * (W - 2 * PAD)


def paired_plot(rows: list[dict], tau: float = 1.0) -> str:
    """An SVG of (A's ACR, B's ACR) per span, coloured by class; a point at 0 had no prompt there."""
    pairs = [(r["a_acr"] or 0.0, r["b_acr"] or 0.0, r) for r in rows]
    finite = [v for a, b, _ in pairs for v in (a, b) if math.isfinite(v)]
    top = max([2.0, *finite]) * 1.05
    y = lambda v: H - _xy(v, top)  # noqa: E731 - the y axis grows upward
    out = [
        f'<line x1="{PAD}" y1="{H - PAD}" x2="{W - PAD}" y2="{H - PAD}" class="axis"/>',
        f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{H - PAD}" class="axis"/>',
        f'<line x1="{PAD}" y1="{H - PAD}" x2="{W - PAD}" y2="{y(top):.1f}" class="grid"/>',
        f'<line x1="{_xy(tau, top):.1f}" y1="{PAD}" x2="{_xy(tau, top):.1f}" y2="{H - PAD}" class="tau"/>',
        f'<line x1="{PAD}" y1="{y(tau):.1f}" x2="{W - PAD}" y2="{y(tau):.1f}" class="tau"/>',
        f'<text x="{W / 2}" y="{H - 12}" text-anchor="middle">ACR on A</text>',
        f'<text transform="translate(16 {H / 2}) rotate(-90)" text-anchor="middle">ACR on B</text>',
    ]
    for tick in range(int(top) + 1):
        out.append(
            f'<text x="{_xy(tick, top):.1f}" y="{H - PAD + 16}" text-anchor="middle">{tick}</text>'
            f'<text x="{PAD - 8}" y="{y(tick) + 4:.1f}" text-anchor="end">{tick}</text>'
        )
    for a, b, r in pairs:
        out.append(
            f'<circle cx="{_xy(a, top):.1f}" cy="{y(b):.1f}" r="5" fill="{COLORS[r["verdict_class"]]}" '
            f'fill-opacity="0.75"><title>{_e(r["span_id"])}: A {_num(a)}, B {_num(b)}, '
            f"{_e(r['verdict_class'])}</title></circle>"
        )
    return (
        f'<svg viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" aria-label="ACR on A against ACR on B" '
        f'xmlns="http://www.w3.org/2000/svg">{"".join(out)}</svg>'
    )


def _prompt(text: str | None) -> str:
    return '<p class="meta">no prompt</p>' if text is None else f"<pre>{_e(text)}</pre>"


def _pair_html(r: dict) -> str:
    b_from = f" from {_e(r['b_prompt_origin'])}" if r["b_prompt_origin"] else ""
    return (
        f'<section class="span"><h3>{_e(r["verdict_class"])} · {_e(r["doc_id"])} · span {_e(r["span_id"])}</h3>'
        f'<p class="meta">{_e(r["selected_as"])}; A: ACR {_num(r["a_acr"])} ({_e(r["a_acr_kind"])}, '
        f"{_e(r['a_prompt_source'])}), completion {_num(r['a_completion'])}; B: ACR {_num(r['b_acr'])}{b_from} "
        f"({_e(r['b_acr_kind'])}, {_e(r['b_prompt_source'])}), completion {_num(r['b_completion'])}, "
        f"A's prompt reproduces on B: {_num(r['warm_from_a'])}; forwards warm {_num(r['warm_forwards'])}, "
        f"cold {_num(r['cold_forwards'])}</p>"
        f"<h4>A's prompt</h4>{_prompt(r['a_prompt'])}<h4>B's prompt</h4>{_prompt(r['b_prompt'])}"
        f"<h4>text</h4><pre>{_e(r['text'])}</pre></section>"
    )


CSS = """body{font:15px/1.45 system-ui,sans-serif;color:#1f2328;max-width:1100px;margin:24px auto;padding:0 20px}
table{border-collapse:collapse}th,td{border-bottom:1px solid #e5e7eb;padding:4px 10px;text-align:left}
.meta{color:#57606a;font-size:13px}.span{border:1px solid #d0d7de;border-radius:8px;padding:10px 14px;margin:12px 0}
pre{white-space:pre-wrap;overflow-wrap:anywhere;background:#f6f8fa;border:1px solid #d0d7de;border-radius:6px;padding:8px}
svg{font:12px system-ui,sans-serif;fill:#57606a}svg .axis{stroke:#57606a}svg .grid{stroke:#adb5bd;stroke-dasharray:2 3}
svg .tau{stroke:#1f2328;stroke-dasharray:5 4}.legend i{display:inline-block;width:10px;height:10px;margin:0 5px 0 12px}
"""


def render_compare(table: pa.Table, summary: dict) -> str:
    rows = table.to_pylist()
    models = summary.get("models", {})
    who = "".join(
        f"<dt>model {side.upper()}</dt><dd>{_e(m.get('model'))} (model hash {_e(str(m.get('model_hash'))[:16])}, "
        f"tokenizer {_e(str(m.get('tokenizer_hash'))[:16])})</dd>"
        for side, m in models.items()
    )
    counts = "".join(
        f'<tr><td><i style="background:{COLORS[c]};display:inline-block;width:10px;height:10px"></i> '
        f"{_e(c)}</td><td>{_num(n)}</td></tr>"
        for c, n in summary["classes"].items()
    )
    cost = summary["warm_vs_cold"]
    cost_line = (
        f"Over {_num(cost['spans'])} spans with A's prompt: the warm search spent {_num(cost['warm']['forwards'])} "
        f"forwards and {_num(round(cost['warm']['s'], 2))} s, the cold one {_num(cost['cold']['forwards'])} forwards "
        f"and {_num(round(cost['cold']['s'], 2))} s; memorized warm {_num(cost['memorized_warm'])}, cold "
        f"{_num(cost['memorized_cold'])}; A's prompt reproduced on B for {_num(cost['a_prompt_reproduces'])}."
    )
    order = {c: i for i, c in enumerate(CLASSES)}
    pairs = "\n".join(
        _pair_html(r) for r in sorted(rows, key=lambda r: (order[r["verdict_class"]], -(r["a_acr"] or 0)))
    )
    body = (
        f"<h1>Comparison of two models on the same spans</h1><dl>{who}</dl><h2>Verdict classes</h2>"
        f"<table><tr><th>class</th><th>spans</th></tr>{counts}</table><p class=meta>{cost_line}</p>"
        f"<h2>ACR on A against ACR on B</h2>{paired_plot(rows)}<p class=meta>Dashed: τ = 1 on each axis; dotted: "
        "B = A. A point at 0 had no prompt on that model; a decision_bound ACR is a lower bound.</p>"
        f"<h2>Each pair's prompts</h2>{pairs}"
    )
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>acr-scan compare</title>'
        f"<style>{CSS}</style></head><body>{body}</body></html>\n"
    )


def write_compare_report(folder: str | Path, out: str | Path) -> Path:
    table, summary = read_compare(folder)
    out = Path(out)
    require(not out.is_dir(), f"--out {out} is a folder; name the HTML file to write")
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out, render_compare(table, summary).encode("utf-8"))
    return out


def export_compare(folder: str | Path, out: str | Path) -> int:
    """The comparison table as CSV, JSONL or Parquet (by extension), both models' identities in
    OUT.models.json beside it (and in a Parquet file's metadata, as compare.parquet holds them)."""
    table, summary = read_compare(folder)
    out = Path(out)
    require(
        out.suffix in WRITERS, f"--out {out}: the format is chosen by extension; use one of {sorted(WRITERS)}"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out, lambda f: WRITERS[out.suffix](table, f))
    atomic_write_json(
        out.with_name(out.name + ".models.json"),
        {"models": summary.get("models", {}), "classes": summary["classes"]},
    )
    return table.num_rows
