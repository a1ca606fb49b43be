"""Plain-text table of ACR records for the terminal."""

from __future__ import annotations

from scanner.measures.acr import aggregate

COLUMNS = "{:>3}  {:>6}  {:>6}  {:>6}  {:>9}  {:>8}  {:<24}  {}"


def _clip(text: str | None, width: int) -> str:
    if text is None:
        return "-"
    shown = repr(text)[1:-1]
    return shown if len(shown) <= width else shown[: width - 1] + "~"


def header(first: dict) -> str:
    lines = [
        f"model: {first['model']}  device: {first['device']} {first['dtype']}  BOS: {first['bos']}",
        f"schedule: {first['schedule']}  tau: {first['tau']}  seed: {first['seed']}  verified by: greedy generation ({first['verify_engine']})",
        COLUMNS.format("#", "target", "prompt", "ACR", "memorized", "time", "prompt string", "target"),
    ]
    return "\n".join(lines)


def row(record: dict, number: int) -> str:
    prompt_tokens = "-" if record["prompt_tokens"] is None else str(record["prompt_tokens"])
    verdict = "yes" if record["memorized"] else "no"
    if record["success"] and not record["verified_generation"]:
        verdict += "?"
    if record.get("predictable"):
        verdict += "/pred"  # memorized, but calibration found it predictable (predictable_reason)
    return COLUMNS.format(
        number,
        record["target_tokens"],
        prompt_tokens,
        f"{record['acr']:.2f}",
        verdict,
        f"{record['wall_s']:.1f}s",
        _clip(record["prompt"], 24),
        _clip(record["target"], 60),
    )


def summary(records: list[dict]) -> str:
    agg = aggregate((r["acr"], r["memorized"], r["success"]) for r in records)
    line = (
        f"{agg.count} targets: average ACR {agg.average_acr:.2f}, portion memorized "
        f"{agg.portion_memorized:.2f}, no prompt found for {agg.failures}"
    )
    calibrated = sum(bool(r.get("calibrated_memorized")) for r in records)
    predictable = [r for r in records if r.get("predictable")]
    line += f"\ncalibrated: portion memorized {calibrated / max(len(records), 1):.2f} ({len(predictable)} predictable)"
    return line + "".join(
        f"\n  predictable: {_clip(r['target'], 40)}: {r['predictable_reason']}" for r in predictable
    )
