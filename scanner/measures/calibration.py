"""Memorized or merely predictable: the calibrated verdict, as pure decision math (no torch, no I/O).

ACR > τ holds for any text a model continues from a short prompt, memorized or not: counting, a
refrain, boilerplate. Calibration asks whether a flagged span is special to this model (METHOD.md,
"Predictable is not memorized"). The probes that gather the evidence run in stages/calibrate.py, only
on memorized spans; this module decides:

- reference model R (--reference-model): the span is predictable when R greedily writes the same text
  from the same prompt string or from the span's natural prefix, or when R's NLL of the span given
  its context is within `nll_margin` nats per model token of the model's own (R finds it nearly as
  likely: the text is not special to the model);
- self-calibration (the same model, no second one): the span is predictable when unrelated prompts of
  the found prompt's length also elicit a long prefix of it (`random_share` of `random_prompts`
  random prompt-vocabulary strings), or when the template alone does (unconditional generation):
  the model writes it whatever it is asked, so a short prompt proves nothing about recall.

`memorized` keeps the paper's meaning; `calibrated_memorized` = memorized and not predictable.
"""

from __future__ import annotations

from dataclasses import dataclass

from scanner.config import CalibrationConfig

# Columns calibration adds to a results row (schema.py documents them); null where not calibrated.
REFERENCE_COLUMNS = (
    "reference_model",
    "reference_from_prompt",
    "reference_from_prefix",
    "reference_match",
    "reference_nll",
    "reference_s",
)
SELF_COLUMNS = (
    "random_prompt_trials",
    "random_prompt_hits",
    "random_prompt_match",
    "unconditional_match",
    "calibration_s",
)
COMPRESSION_COLUMNS = ("gzip_ratio", "zlib_ratio", "lzma_ratio", "smaz_ratio")
VERDICT_COLUMNS = ("predictable", "predictable_reason", "calibrated_memorized")
COLUMNS = VERDICT_COLUMNS + SELF_COLUMNS + REFERENCE_COLUMNS + COMPRESSION_COLUMNS


@dataclass(frozen=True)
class SelfEvidence:
    trials: int  # unrelated prompts tried
    hits: int  # of them, those that elicited at least `long_prefix` of the span
    best_match: float  # the longest leading share of the span any of them elicited
    unconditional_match: float  # the leading share of the span the template alone elicits


@dataclass(frozen=True)
class ReferenceEvidence:
    model: str
    from_prompt: bool  # R greedily writes the span's text from the found prompt string
    from_prefix: bool | None  # ... from the natural prefix (certificate); None when there is none
    match: float  # the longest leading share of the span's characters R wrote (prompt or prefix)
    nll: float | None  # R's NLL of the span given its context, nats per *model* token
    model_nll: float | None  # the model's NLL of the span given the same context, nats per token
    seconds: float


def self_reason(ev: SelfEvidence, config: CalibrationConfig) -> str | None:
    if ev.trials and ev.hits / ev.trials >= config.random_share:
        return (
            f"{ev.hits}/{ev.trials} unrelated prompts of the same length elicit at least "
            f"{config.long_prefix:.0%} of it"
        )
    if ev.unconditional_match >= config.long_prefix:
        return f"the template alone (no prompt) elicits {ev.unconditional_match:.0%} of it"
    return None


def reference_reason(ev: ReferenceEvidence, config: CalibrationConfig) -> str | None:
    if ev.from_prompt:
        return f"the reference model writes it from the same prompt ({ev.model})"
    if ev.from_prefix:
        return f"the reference model writes it from its natural prefix ({ev.model})"
    if ev.nll is not None and ev.model_nll is not None and ev.nll <= ev.model_nll + config.nll_margin:
        return (
            f"the reference model finds it nearly as likely: NLL {ev.nll:.2f} <= {ev.model_nll:.2f} + "
            f"{config.nll_margin:g} nats/token ({ev.model})"
        )
    return None


def decide(
    self_ev: SelfEvidence | None, ref_ev: ReferenceEvidence | None, config: CalibrationConfig
) -> tuple[bool, str | None]:
    """(predictable, why): the reference's evidence first, then the model's own; None when not predictable."""
    reasons = [
        r
        for r in (ref_ev and reference_reason(ref_ev, config), self_ev and self_reason(self_ev, config))
        if r
    ]
    return (bool(reasons), "; ".join(reasons) or None)


def leading_share(text: str, written: str) -> float:
    """The share of `text`'s characters that `written` reproduces from its start."""
    if not text:
        return 0.0
    same = next(
        (i for i, (a, b) in enumerate(zip(text, written, strict=False)) if a != b),
        min(len(text), len(written)),
    )
    return same / len(text)


def empty_columns() -> dict:
    """The calibration columns of a row that was not calibrated."""
    return {**dict.fromkeys(COLUMNS), "calibrated_memorized": False}


def compression_columns(thresholds: list[dict]) -> dict:
    """The compression ratios of a searched span, from its `thresholds` entries (computed by the search)."""
    ratios = {t["name"]: t["tau"] for t in thresholds or []}
    return {f"{name}_ratio": ratios.get(name) for name in ("gzip", "zlib", "lzma", "smaz")}


def columns(
    memorized: bool,
    self_ev: SelfEvidence | None,
    ref_ev: ReferenceEvidence | None,
    config: CalibrationConfig,
    calibration_s: float,
) -> dict:
    """The calibration columns of a memorized span from its evidence."""
    predictable, reason = decide(self_ev, ref_ev, config)
    out = {
        "predictable": predictable,
        "predictable_reason": reason,
        "calibrated_memorized": bool(memorized and not predictable),
        "calibration_s": calibration_s,
    }
    if self_ev is not None:
        out.update(
            random_prompt_trials=self_ev.trials,
            random_prompt_hits=self_ev.hits,
            random_prompt_match=self_ev.best_match,
            unconditional_match=self_ev.unconditional_match,
        )
    if ref_ev is not None:
        out.update(
            reference_model=ref_ev.model,
            reference_from_prompt=ref_ev.from_prompt,
            reference_from_prefix=ref_ev.from_prefix,
            reference_match=ref_ev.match,
            reference_nll=ref_ev.nll,
            reference_s=ref_ev.seconds,
        )
    return out


def counts(rows: list[dict]) -> dict[str, int]:
    """Memorized spans before and after calibration, side by side."""
    memorized = sum(bool(r.get("memorized")) for r in rows)
    calibrated = sum(bool(r.get("calibrated_memorized")) for r in rows)
    predictable = sum(bool(r.get("memorized")) and r.get("predictable") is True for r in rows)
    return {"memorized": memorized, "calibrated_memorized": calibrated, "predictable": predictable}


def counts_line(c: dict[str, int]) -> str:
    return (
        f"memorized {c['memorized']} (paper's verdict), calibrated memorized {c['calibrated_memorized']} "
        f"({c['predictable']} predictable)"
    )
