"""The text of `acr-scan plan`: each projected figure with its range and its source, then the inputs
and where each comes from (scanner/run/plan.py computes them; --json prints the same object)."""

from __future__ import annotations

OUTCOME_NAMES = {
    "memorized": "memorized",
    "not_memorized": "not memorized",
    "rejected_early": "rejected early",
    "failed": "failed",
}


def _number(value, unit: str = "") -> str:
    if value is None:
        return "n/a"
    if unit == "s":
        return _seconds(value)
    return f"{value:,.0f}" if abs(value) >= 10 else f"{value:,.2f}"


def _seconds(s: float) -> str:
    return f"{s / 3600:,.2f} h" if s >= 3600 else f"{s / 60:,.1f} min" if s >= 60 else f"{s:,.1f} s"


def _line(label: str, fig: dict, unit: str = "", source: bool = True) -> str:
    text = f"  {label:<28} {_number(fig['value'], unit):>12}  [{_number(fig['low'], unit)} .. {_number(fig['high'], unit)}]"
    return text + (f"  ({fig['source']})" if source else "")


def plan_lines(plan: dict) -> list[str]:
    s, c, p = plan["sample"], plan["corpus"], plan["projection"]
    f = p["figures"]
    lines = [
        f"screened: {s['documents']} of {s['of']} documents (seed {s['seed']}), {s['bytes']:,} bytes, "
        f"{s['tokens']:,} tokens -> {s['path']}, scanned into {s['run']}",
        f"searched: {s['drawn']} of the {s['population']} candidates the scan would search ({s['caps']})",
        f"corpus: {c['documents']:,} documents, {c['bytes']:,} bytes ({c['source']})",
        f"projection of the whole scan, x{p['scale']['value']:,.2f} ({p['scale']['source']}); "
        f"range: {p['range']}; each figure {f['corpus_tokens']['source']} unless said:",
        _line("corpus tokens", f["corpus_tokens"], source=False),
        _line("screen worker-seconds", f["screen_s"], "s", source=False),
        _line("candidates", f["candidates"], source=False),
        _line("settled by certificates", f["certified"], source=False),
        _line("certify worker-seconds", f["certify_s"], "s", source=False),
    ]
    for name, label in OUTCOME_NAMES.items():
        if (f.get(f"{name}.candidates") or {}).get("value"):  # outcomes the sample saw
            lines.append(_line(f"searched, {label}", f[f"{name}.candidates"], source=False))
            lines.append(_line("  their search seconds", f[f"{name}.seconds"], "s", source=False))
    lines += [
        _line("search steps (all candidates)", f["search_steps"], source=False),
        _line("search worker-seconds, all", f["search_s"], "s", source=False),
        _line("  under the caps", p["search_s"], "s", source=False),
        _line(f"recall audit, {p['audit_s']['searches']} searches", p["audit_s"], "s"),
        _line("passages (certified, drawn)", f["passages"], source=False),
        _line("passage worker-seconds", f["passage_s"], "s", source=False),
        _line("worker-seconds in all", p["worker_s"], "s", source=False),
        _line("wall time", p["wall_s"], "s"),
        _line("worker-hours (GPU-h on GPUs)", p["worker_h"]),
    ]
    if p["searched_share"]["value"] < 1:
        lines.append(
            f"  searched: {p['searched_share']['value']:.0%} of the candidates ({p['searched_share']['source']})"
        )
    lines += _budget_lines(p["budget"])
    lines.append("inputs:")
    lines += [f"  {name} = {_input(v['value'])}  ({_source(v)})" for name, v in plan["inputs"].items()]
    return lines


def _source(fig: dict) -> str:
    if fig["value"] is None and fig["source"].startswith("measured"):
        return "not measured: the sample had nothing to measure it on"
    return fig["source"]


def _input(value) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {_input(v)}" for k, v in value.items())
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _budget_lines(budget: dict) -> list[str]:
    unit = "s" if budget["kind"] == "seconds" else ""
    lines = [_line(f"budget to search all ({budget['kind']})", budget["needed"], unit, source=False)]
    if budget["given"] is not None:
        covers = budget["covers"]
        lines.append(
            f"  --search-budget given: {_number(budget['given'], unit)} {budget['kind']}, reaching "
            f"{covers['value']:.0%} [{covers['low']:.0%} .. {covers['high']:.0%}] of the candidates "
            f"({covers['source']})"
        )
    return lines
