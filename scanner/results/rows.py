"""The one builder of results rows: a span's row as each stage leaves it.

Every row starts from the schema's defaults (scanner/schema/results.py), so a column added there is in
every row without a change here; a stage sets only what it measured. A searched row and a row settled by
its certificate share their verdict columns through `verdict_columns`. Arguments are plain values or
duck-typed result objects (a Span, a Screened, an AcrResult, a verification check): this module imports
no engine, so it loads without torch.
"""

from __future__ import annotations

import json

from scanner.measures.overlap import prompt_overlap
from scanner.schema import RESULTS_WALL_CLOCK, default_row

REASON_CHARS = 500  # a failure's reason keeps the error's head: tracebacks belong in the shard log


def base_row(span, shard: int, tau: float, extra: str | None = None) -> dict:
    """A span's row before the screen: where it stands, its target, skipped with the span's skip_reason
    (the screen replaces both for a live span)."""
    return {
        **default_row(),
        "doc_id": span.doc_id,
        "span_id": span.span_id,
        "char_start": span.char_start,
        "char_end": span.char_end,
        "token_start": span.token_start,
        "token_end": span.token_end,
        "text": span.text,
        "target_tokens": len(span.target_ids),
        "target_ids": list(span.target_ids),
        "status": "skipped",
        "reason": span.skip_reason,
        "tau": tau,
        "shard": shard,
        "extra": extra,
        "doc_row": span.doc_row,
        "anchored": span.anchored,
    }


def screened_row(
    row: dict, screened, certificate: str | None, seconds: float, engine: str, extraction: dict
) -> dict:
    """The row after the teacher-forced screen (`screened`: a stages.screen.Screened), screened out
    until phase 2 takes it up; `extraction` holds its p_z columns (measures/extraction.py)."""
    return {
        **row,
        "status": "screened_out",
        "reason": None,
        "greedy_match_rate": screened.greedy_match_rate,
        "mean_nll": screened.mean_nll,
        "discoverable": screened.discoverable,
        "certificate_tokens": screened.certificate_tokens,
        "certificate_prompt": certificate,
        "screen_s": seconds,
        "screen_engine": engine,
        **extraction,
    }


def threshold_entries(thresholds: dict) -> list[dict]:
    """{name: {"tau", "memorized"}} as the `thresholds` column's list of entries."""
    return [{"name": k, "tau": v["tau"], "memorized": v["memorized"]} for k, v in thresholds.items()]


def verdict_columns(
    *,
    memorized: bool,
    acr: float | None,
    acr_kind: str,
    prompt: str | None,
    prompt_ids: list[int] | None,
    prompt_tokens: int | None,
    thresholds: dict,
    teacher_forced: bool | None,
    min_margin: float | None,
    verify_disagrees: bool | None,
    rejected_matches: int | None,
    verifier: dict,
    verified_generation: bool,
    generation: tuple[float | None, int | None],
    fragile_below: float | None,
) -> dict:
    """The verdict of a measured span, however it was measured; `verifier` is the verify engine's
    {"engine", "version", "dtype", "flags"} (HFEngine.verify_info()); `generation`: the smallest margin
    of the verifying generation and its position; `fragile_below`: the fragile threshold."""
    return {
        "status": "memorized" if memorized else "not_memorized",
        "reason": None,
        "acr": acr,
        **robustness_columns(generation, fragile_below if prompt is not None else None),
        "acr_kind": acr_kind,
        "memorized": memorized,
        "prompt": prompt,
        "prompt_ids": prompt_ids,
        "prompt_tokens": prompt_tokens,
        "thresholds": threshold_entries(thresholds),
        "verified_generation": verified_generation,
        "teacher_forced": teacher_forced,
        "min_margin": min_margin,
        "verify_engine": verifier["engine"],
        "verify_version": verifier["version"],
        "verify_dtype": verifier["dtype"],
        "verify_flags": json.dumps(verifier["flags"], sort_keys=True),
        "verify_disagrees": verify_disagrees,
        "rejected_matches": rejected_matches,
    }


def attempt_entry(stage: str, attempt: dict, seed: int | None, target_tokens: int) -> dict:
    """One entry of the `attempts` column from one attempt of a search's trace (AcrResult.trace)."""
    success = bool(attempt["success"])
    scored = attempt.get("top_rights") or []
    right = target_tokens if success else (max(scored) if scored else None)
    stopped = attempt.get("rejected_early")
    loss = attempt.get("best_loss")
    return {
        "stage": stage,
        "length": attempt["length"],
        "trial": attempt["trial"],
        "tries": attempt.get("tries", 1),
        "warm": attempt["warm"],
        "seed": seed,
        "max_steps": attempt.get("max_steps", attempt["steps"]),
        "steps": attempt["steps"],
        "best_loss": loss,
        "best_right": right,
        "outcome": "success" if success else "rejected_early" if stopped else "failed",
        "stop_reason": stopped,
    }


def check_entry(stage: str, warm: str, length: int, target_tokens: int | None, success: bool = True) -> dict:
    """A prompt checked by generation before any optimization (a certificate, a decided prompt), at no
    GCG step: it elicited the span (all `target_tokens` right), or generation refuted it."""
    return {
        "stage": stage,
        "length": length,
        "trial": 0,
        "tries": 1,
        "warm": warm,
        "seed": None,
        "max_steps": 0,
        "steps": 0,
        "best_loss": None,
        "best_right": target_tokens if success else None,
        "outcome": "success" if success else "failed",
        "stop_reason": None,
    }


def search_attempts(row: dict, result, stage: str) -> list[dict]:
    """The attempts of one search: the prompt it started from, checked by generation (the decided prompt
    it shrinks, else the span's natural-prefix certificate where it has one, verified or refuted), then
    every attempt of its trace."""
    checks = []
    if result.decided_tokens is not None:
        checks.append(check_entry(stage, "decided", result.decided_tokens, result.target_tokens))
    elif result.certificate_tokens is not None:
        checks.append(check_entry(stage, "certificate", result.certificate_tokens, result.target_tokens))
    elif row.get("certificate_prompt") and row.get("certificate_tokens") is not None:
        checks.append(check_entry(stage, "certificate", row["certificate_tokens"], None, success=False))
    return checks + [attempt_entry(stage, a, result.seed, result.target_tokens) for a in result.trace]


def robustness_columns(generation: tuple[float | None, int | None], fragile_below: float | None) -> dict:
    """generation_margin, its position, the threshold and `fragile` (below it); all null without a
    margin or a threshold (no verified prompt)."""
    margin, at = generation
    if margin is None or fragile_below is None:
        return {
            "generation_margin": None,
            "generation_margin_at": None,
            "fragile_below": None,
            "fragile": None,
        }
    return {
        "generation_margin": margin,
        "generation_margin_at": at,
        "fragile_below": fragile_below,
        "fragile": margin < fragile_below,
    }


def searched_row(row: dict, result, seconds: float, stage: str = "search") -> dict:
    """The row after MiniPrompt (`result`: a search.miniprompt.AcrResult) in a unit of `stage`."""
    verifier = {
        "engine": result.verify_engine,
        "version": result.verify_version,
        "dtype": result.verify_dtype,
        "flags": result.verify_flags,
    }
    verdict = verdict_columns(
        memorized=result.memorized,
        acr=result.acr,
        acr_kind="decision_bound" if result.bounded else "searched_min",
        prompt=result.prompt,
        prompt_ids=result.prompt_ids,
        prompt_tokens=result.prompt_tokens,
        thresholds=result.thresholds,
        teacher_forced=result.teacher_forced,
        min_margin=result.min_margin,
        verify_disagrees=result.verify_disagrees,
        rejected_matches=result.rejected_matches,
        verifier=verifier,
        verified_generation=result.verified_generation,
        generation=(result.generation_margin, result.generation_margin_at),
        fragile_below=result.fragile_below,
    )
    return {
        **row,
        **verdict,
        "steps": result.steps,
        "forwards": result.forwards,
        "search_s": seconds,
        "rejected_early": result.rejected_early,
        "attempts": search_attempts(row, result, stage),
    }


def certified_row(
    row: dict, check, acr: float, thresholds: dict, verifier: dict, fragile_below: float
) -> dict:
    """The row settled by its natural-prefix certificate, without GCG: `check` is the verify engine's
    greedy generation from the certificate string, which reproduced the span (HFEngine.verify); `acr`
    is the bound |y| / |certificate|. No search ran, so no prompt was refuted."""
    verdict = verdict_columns(
        memorized=True,
        acr=acr,
        acr_kind="certificate_bound",
        prompt=check.prompt,
        prompt_ids=check.prompt_ids,
        prompt_tokens=len(check.prompt_ids),
        thresholds=thresholds,
        teacher_forced=check.teacher_forced,
        min_margin=check.min_margin,
        verify_disagrees=check.disagrees,
        rejected_matches=0,
        verifier=verifier,
        verified_generation=True,
        generation=(check.generation_margin, check.generation_margin_at),
        fragile_below=fragile_below,
    )
    attempt = check_entry("certify", "certificate", len(check.prompt_ids), row["target_tokens"])
    return {**row, **verdict, "steps": 0, "attempts": [attempt]}


def measured_prompt(row: dict, k: int, document: str | None = None, document_ids=None) -> dict:
    """The row with its prompt measured against its span and, where given, its document (text, and
    token ids or their overlap.token_string): the runs shared and `prompt_source` at `k` tokens. A
    certificate is the work's text however short: the one that settled the span, or the natural prefix
    a search kept because nothing shorter was found."""
    prompt = row["prompt"]
    certificate = row["acr_kind"] == "certificate_bound" or (
        prompt is not None and prompt == row["certificate_prompt"]
    )
    return {
        **row,
        **prompt_overlap(
            prompt,
            row["prompt_ids"],
            row["text"],
            row["target_ids"],
            is_certificate=certificate,
            k=k,
            document=document,
            document_ids=document_ids,
        ),
    }


COPY_FREE = (
    "steps",
    "forwards",
    *RESULTS_WALL_CLOCK,
)  # a copy's own cost: none (counted once, on the searched one)


def copied_row(row: dict, searched_screen: dict, searched: dict) -> dict:
    """The row of a copy (`row`, as the screen left it) of the span that was searched: the same target
    tokens, so every column the search, certificate or calibration changed on that span (`searched`
    against `searched_screen`, its screen row) is the copy's too; the copy keeps its place and screen
    columns, costs nothing and names the span searched in `searched_as`."""
    changed = {k: v for k, v in searched.items() if searched_screen.get(k) != v}
    free = {k: default_row()[k] for k in COPY_FREE if k in changed}
    return {**row, **changed, **free, "searched_as": searched["span_id"]}


def failed_row(row: dict, error: BaseException, during: str = "") -> dict:
    """The row of a span whose step raised: failed, retried on resume; `during` names the step."""
    reason = f"{during}: " if during else ""
    return {**row, "status": "failed", "reason": f"{reason}{type(error).__name__}: {error}"[:REASON_CHARS]}
