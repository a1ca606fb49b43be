"""Calibration stage: the probes behind the calibrated verdict (scanner/measures/calibration.py decides), run only on
memorized spans, in the process (Ray actor) that ran their search, after it.

- Self-calibration, on the scan's own engine: `random_prompts` unrelated prompts (random prompt-vocabulary
  strings of the found prompt's length, seeded per span) and the template alone, greedy, in one verify
  batch (vLLM's when it verifies): how much of the span each elicits.
- The reference model R (--reference-model; an HF engine loaded once per process, with its own
  tokenizer and BOS policy): greedy generation from the found prompt string and from the natural
  prefix, compared with the span on *text*; R's NLL of the span given its context, in nats per model
  token (the denominator of the model's own mean_nll, so the two compare across tokenizers).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import asdict, replace

import torch
import torch.nn.functional as F

from scanner.config import CalibrationConfig, EngineConfig, ModelConfig, PromptConfig
from scanner.engine.hf import HFEngine
from scanner.engine.template import typed_ids
from scanner.measures import calibration as calibrate
from scanner.measures.calibration import ReferenceEvidence, SelfEvidence
from scanner.stages.spans import tokenize_document

log = logging.getLogger(__name__)


def reference_engine(engine: HFEngine, model: ModelConfig, reference: str, prompt: PromptConfig) -> HFEngine:
    """R, loaded on first use with the scan's device, dtype and threads (HF: it only generates and
    scores a few memorized spans, vLLM would reserve GPU memory for nothing). Kept by the measured
    model's `engine` (a worker loads R once, for all its units) and closed with it."""
    config = replace(model, model=reference, revision=None)
    key = json.dumps([asdict(config), asdict(prompt)], sort_keys=True)
    if key not in engine.references:
        from scanner.engine.build import build_engines

        log.info("loading the reference model %s", reference)
        engine.references[key] = build_engines(config, prompt, EngineConfig(verify="hf", screen="hf"))
    return engine.references[key]


def self_evidence(
    engine: HFEngine, prompt_tokens: int | None, target_ids: list[int], config: CalibrationConfig, seed: int
) -> SelfEvidence:
    """Unrelated prompts of the found prompt's length (at least 1 token) and the template alone."""
    from scanner.search.miniprompt import random_prompt

    generator = torch.Generator().manual_seed(seed)
    length = max(prompt_tokens or 0, 1)
    prompts = [engine.decode(random_prompt(engine, length, generator)) for _ in range(config.random_prompts)]
    checks = engine.verify_many([*prompts, ""], target_ids)
    shares = [c.matched_tokens / len(target_ids) for c in checks]
    return SelfEvidence(
        trials=len(prompts),
        hits=sum(s >= config.long_prefix for s in shares[:-1]),
        best_match=max(shares[:-1], default=0.0),
        unconditional_match=shares[-1],
    )


def written_text(engine: HFEngine, prompt: str, text: str) -> str | None:
    """What greedy generation writes after the typed `prompt`, as long as `text` needs (None: the
    template leaves no input to generate from)."""
    typed = typed_ids(engine.tokenizer, engine.template, [prompt])[0]
    if not typed:
        return None
    new = len(engine.tokenizer(text, add_special_tokens=False).input_ids) + 2  # splits may differ in context
    ids = engine.generate_ids([typed], new)[0]
    return engine.tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)


@torch.no_grad()
def text_nll(engine: HFEngine, context: str, text: str, target_ids: list[int] | None = None) -> float:
    """Total NLL (nats) of `text` (or of `target_ids`) after `context` typed into the engine's template.
    Without any token before it (no BOS, no context), the first token is not scored."""
    before = (
        typed_ids(engine.tokenizer, engine.template, [context])[0]
        if context or engine.template.prefix_ids
        else []
    )
    ids = (
        list(target_ids)
        if target_ids is not None
        else engine.tokenizer(text, add_special_tokens=False).input_ids
    )
    seq = torch.tensor([before + ids], device=engine.device)
    logits = engine.logits(seq)[0, :-1].float()
    gold = seq[0, 1:]
    nll = F.cross_entropy(logits, gold, reduction="none")[max(len(before) - 1, 0) :]
    return float(nll.sum())


def _moved_space(prompt: str, text: str) -> tuple[str, str]:
    """A prompt ending in spaces is given to R without them, the spaces then expected before the text:
    in the model's tokens "1, 2, " may be a whole prompt, while R's tokenizer attaches a space to the
    next word and would see a dangling space it rarely saw in training. (Newlines stay: they are tokens
    of their own.)"""
    kept = prompt.rstrip(" \t")
    return kept, prompt[len(kept) :] + text


def reference_evidence(
    ref: HFEngine,
    name: str,
    text: str,
    prompt: str | None,
    prefix: str | None,
    context: str,
    model_nll: float | None,
    target_tokens: int,
) -> ReferenceEvidence:
    start = time.perf_counter()
    shares = {}
    for kind, source in (("prompt", prompt), ("prefix", prefix)):
        written = None
        if source is not None:
            source, expected = _moved_space(source, text)
            written = written_text(ref, source, expected)
        shares[kind] = None if written is None else calibrate.leading_share(expected, written)
    nll = text_nll(ref, *_moved_space(context, text)) / target_tokens
    return ReferenceEvidence(
        model=name,
        from_prompt=shares["prompt"] == 1.0,
        from_prefix=None if shares["prefix"] is None else shares["prefix"] == 1.0,
        match=max((s for s in shares.values() if s is not None), default=0.0),
        nll=nll,
        model_nll=model_nll,
        seconds=time.perf_counter() - start,
    )


def calibrate_span(
    engine: HFEngine,
    ref: HFEngine | None,
    config: CalibrationConfig,
    *,
    text: str,
    target_ids: list[int],
    prompt: str | None,
    prompt_tokens: int | None,
    prefix: str | None,
    context: str,
    model_nll: float | None,
    seed: int,
) -> dict:
    """The calibration columns of one memorized span."""
    start = time.perf_counter()
    self_ev = (
        self_evidence(engine, prompt_tokens, target_ids, config, seed) if config.random_prompts else None
    )
    ref_ev = None
    if ref is not None:
        ref_ev = reference_evidence(
            ref, config.reference_model, text, prompt, prefix, context, model_nll, len(target_ids)
        )
    seconds = time.perf_counter() - start - (ref_ev.seconds if ref_ev else 0.0)
    return calibrate.columns(True, self_ev, ref_ev, config, seconds)


def span_seed(seed: int, key: str) -> int:
    """The unrelated prompts of a span depend on (seed, span), never on the shard or worker."""
    return int.from_bytes(hashlib.sha256(f"calibrate:{seed}:{key}".encode()).digest()[:4], "big")


def _doc_key(row: str | None, doc_id: str) -> tuple[str, str]:
    return (row or "", doc_id)


def _context(doc_text: str | None, row: dict, tokenizer, context_tokens: int, cache: dict) -> str:
    """The preceding document text the screen gave the span (its `context_tokens` tokens), as a string."""
    if not doc_text or row["token_start"] == 0:
        return ""
    key = _doc_key(row.get("doc_row"), row["doc_id"])
    if key not in cache:
        cache[key] = tokenize_document(doc_text, tokenizer)[1]
    offsets = cache[key]
    return doc_text[offsets[max(row["token_start"] - context_tokens, 0)][0] : row["char_start"]]


def _searched(row: dict) -> dict:
    return {**row, **calibrate.compression_columns(row["thresholds"])}


def calibrate_rows(
    engine: HFEngine,
    rows: dict,
    docs: list,
    config: CalibrationConfig,
    *,
    model: ModelConfig,
    prompt: PromptConfig,
    context_tokens: int,
    exact_window: bool = True,
    progress=lambda done, total: None,
) -> dict:
    """New rows (by span_id) of a shard's searched spans: compression ratios for each, the calibrated
    verdict for each memorized one. A span whose calibration raises is a failed row (retried on resume).
    `exact_window`: the screen's mean_nll saw exactly the context_tokens R is given; else (streamed
    windows, a longer context) the model's NLL is computed again on R's context, so the two compare.
    `progress(done, total)` is told before each memorized span and at the end (a unit's heartbeat)."""
    out = {k: _searched(r) for k, r in rows.items() if r["status"] in ("memorized", "not_memorized")}
    flagged = [r for r in out.values() if r["status"] == "memorized"]
    if not config.enabled:
        return {k: {**r, "calibrated_memorized": r["memorized"]} for k, r in out.items()}
    ref = (
        reference_engine(engine, model, config.reference_model, prompt)
        if config.reference_model and flagged
        else None
    )
    texts, offsets = {_doc_key(d.row, d.doc_id): d.text for d in docs}, {}  # ids may repeat, rows do not
    for done, row in enumerate(flagged):
        progress(done, len(flagged))
        try:
            text = texts.get(_doc_key(row.get("doc_row"), row["doc_id"]))
            context = _context(text, row, engine.tokenizer, context_tokens, offsets) if ref else ""
            model_nll = row["mean_nll"]
            if ref and not exact_window:
                model_nll = text_nll(engine, context, row["text"], row["target_ids"]) / len(row["target_ids"])
            out[row["span_id"]] = {
                **row,
                **calibrate_span(
                    engine,
                    ref,
                    config,
                    text=row["text"],
                    target_ids=row["target_ids"],
                    prompt=row["prompt"],
                    prompt_tokens=row["prompt_tokens"],
                    prefix=row["certificate_prompt"],
                    context=context,
                    model_nll=model_nll,
                    seed=span_seed(config.seed, row["span_id"]),
                ),
            }
        except Exception as err:  # noqa: BLE001 - one span's fault must not lose the shard
            log.error("calibration of span %s failed", row["span_id"], exc_info=err)
            out[row["span_id"]] = {
                **row,
                "status": "failed",
                "reason": f"calibration: {type(err).__name__}: {err}"[:500],
            }
    progress(len(flagged), len(flagged))
    return out


def calibrate_record(
    engine: HFEngine,
    record: dict,
    config: CalibrationConfig,
    *,
    model: ModelConfig,
    prompt: PromptConfig,
    natural_prefix: str | None,
) -> dict:
    """An `acr` record with the calibration columns; the model's NLL of the target is computed here
    (given the natural prefix, else the template alone), as `mean_nll`."""
    ratios = calibrate.compression_columns(
        [{"name": k, "tau": v["tau"]} for k, v in record["thresholds"].items()]
    )
    out = {**record, **calibrate.empty_columns(), **ratios, "mean_nll": None}
    if not record["memorized"] or not config.enabled:
        return {**out, "calibrated_memorized": record["memorized"]}
    ids, text = record["target_ids"], record["target"]
    ref = reference_engine(engine, model, config.reference_model, prompt) if config.reference_model else None
    model_nll = text_nll(engine, natural_prefix or "", text, ids) / len(ids) if ref else None
    columns = calibrate_span(
        engine,
        ref,
        config,
        text=text,
        target_ids=ids,
        prompt=record["prompt"],
        prompt_tokens=record["prompt_tokens"],
        prefix=natural_prefix,
        context=natural_prefix or "",
        model_nll=model_nll,
        seed=span_seed(config.seed, text),
    )
    return {**out, "mean_nll": model_nll, **columns}
