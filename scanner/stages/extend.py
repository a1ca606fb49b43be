"""Extension stage: greedy generation from a passage's prompts past its end, checked against the document.

Book-extraction work regenerates whole chapters from a few seed tokens; a scan's windows only show
what each window's prompt elicits. Per passage, each candidate prompt (the best span's prompt, the
last span's prompt and the last span's natural-prefix certificate) is typed in the template as the
verify path types it (engine/template.typed_ids), and greedy generation runs for the tokens from its
span's start to the passage's end plus `extend_tokens`. The generated ids are compared token by token
with the document's own ids from that span's start; the longest leading run over the candidates is the
verified extension. All candidates of all passages go to the engine in one call (vLLM batches them; HF
left-pads them into batches and generates near ties again alone, unpadded, as verification does, so no
padding changes a greedy choice: engine/generate.py).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from scanner.engine.template import typed_ids
from scanner.measures.overlap import WORK_TEXT
from scanner.measures.passages import Extension, Passage, best_span, verified_run

if TYPE_CHECKING:
    from scanner.engine.hf import HFEngine

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DocumentTokens:
    """A document's text, token ids and each token's character range (stages/spans.tokenize_document)."""

    text: str
    ids: list[int]
    offsets: list[tuple[int, int]]


@dataclass(frozen=True)
class _Job:
    passage: int  # index into the passages
    prompt: str
    span: dict  # the result row whose token_start the comparison starts from
    new_tokens: int


def candidates(passage: Passage) -> list[tuple[str, dict]]:
    """(prompt string, span row) to generate from, best evidence first, without repeats."""
    last = max(passage.spans, key=lambda s: (s["token_end"], s["token_start"]))
    best = best_span(passage)
    pairs = [(best.get("prompt"), best), (last.get("prompt"), last), (last.get("certificate_prompt"), last)]
    seen, out = set(), []
    for prompt, span in pairs:
        if prompt is not None and (prompt, span["span_id"]) not in seen:
            seen.add((prompt, span["span_id"]))
            out.append((prompt, span))
    return out


def _jobs(
    engine: HFEngine, passages: list[Passage], docs: dict[str, DocumentTokens], budget: int
) -> tuple[list[_Job], list[list[int]]]:
    jobs, inputs = [], []
    for index, passage in enumerate(passages):
        pairs = candidates(passage)
        typed = typed_ids(engine.tokenizer, engine.template, [p for p, _ in pairs]) if pairs else []
        for (prompt, span), ids in zip(pairs, typed, strict=True):
            wanted = passage.token_end + budget - span["token_start"]
            room = len(docs[passage.key].ids) - span["token_start"]  # nothing to compare past the end
            if engine.max_positions:
                room = min(room, engine.max_positions - len(ids))
            if ids and min(wanted, room) > 0:
                jobs.append(_Job(index, prompt, span, min(wanted, room)))
                inputs.append(ids)
    return jobs, inputs


def _source(job: _Job | None) -> str | None:
    """prompt_source of the job's prompt: a certificate is the work's text; a span's prompt keeps its own."""
    if job is None:
        return None
    if job.prompt == job.span.get("certificate_prompt"):
        return WORK_TEXT
    return job.span.get("prompt_source")


def extend_passages(
    engine: HFEngine, passages: list[Passage], docs: dict[str, DocumentTokens], budget: int
) -> list[Extension]:
    """The verified extension of each passage (in order). `docs`: by passage key (doc_row)."""
    start = time.perf_counter()
    jobs, inputs = _jobs(engine, passages, docs, budget)
    generated = engine.generate_ids(inputs, [job.new_tokens for job in jobs]) if jobs else []
    each = (time.perf_counter() - start) / max(len(passages), 1)
    engine_name = "hf" if engine.verifier is None else "vllm"
    best: dict[int, tuple[int, _Job]] = {}
    for job, ids in zip(jobs, generated, strict=True):
        doc = docs[passages[job.passage].key]
        begin = job.span["token_start"]
        end = begin + verified_run(ids[: job.new_tokens], doc.ids[begin : begin + job.new_tokens])
        if job.passage not in best or end > best[job.passage][0]:
            best[job.passage] = (end, job)
    out = []
    for index, passage in enumerate(passages):
        end, job = best.get(index, (passage.token_end, None))
        end = max(end, passage.token_end)  # a prompt may stop inside the passage its spans cover
        doc = docs[passage.key]
        char_end = doc.offsets[end - 1][1] if end > passage.token_end else passage.char_end
        out.append(
            Extension(
                token_end=end,
                char_end=char_end,
                text=doc.text[passage.char_end : char_end],
                prompt=job.prompt if job else None,
                span_id=job.span["span_id"] if job else None,
                engine=engine_name,
                seconds=each,
                prompt_source=_source(job),
            )
        )
    log.info(
        "extended %d passages: %d generations in %.1f s",
        len(passages),
        len(jobs),
        time.perf_counter() - start,
    )
    return out
