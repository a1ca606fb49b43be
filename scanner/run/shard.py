"""The worker's work on rows: a shard's documents through spans -> screen (phase 1), a unit's candidates
through MiniPrompt and calibration (phase 2), and the engines' opening with their provenance.

The same functions run in-process (local executor, tests) and inside long-lived Ray actors (run/tasks.py
Worker). Each span's search seed is derived from (seed, span_id), so a span's result does not depend on which
shard, worker or relaunch ran it: resumed and uninterrupted runs give equal tables.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pyarrow as pa

from scanner import __version__, stop
from scanner.config import ScanConfig
from scanner.engine import batched
from scanner.engine.build import build_engines
from scanner.engine.hf import HFEngine
from scanner.measures import extraction
from scanner.results.rows import base_row, failed_row, screened_row, searched_row
from scanner.schema import results_schema
from scanner.search.miniprompt import Cut, measure_many
from scanner.search.progress import QUIET, SearchObserver
from scanner.search.request import Certificate, Decided, SearchRequest
from scanner.search.resume import Resume
from scanner.stages.anchor import screen_with_anchors
from scanner.stages.calibrate import calibrate_rows
from scanner.stages.read import Document
from scanner.stages.screen import ScreenWork
from scanner.stages.spans import Span, make_spans, tokenize_document
from scanner.stages.stream import resolve_window, window_info
from scanner.storage.rundir import Shard, config_hash, run_identity

log = logging.getLogger(__name__)


def span_seed(seed: int, span_id: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{span_id}".encode()).digest()[:4], "big")


def _is_candidate(row: dict, config: ScanConfig) -> bool:
    return row["certificate_tokens"] is not None or row["greedy_match_rate"] >= config.min_match_rate


def search_rows(
    engine: HFEngine,
    rows: list[dict],
    config: ScanConfig,
    width: int,
    decided: dict[str, str] | None = None,
    stage: str = "search",
    observer: SearchObserver = QUIET,
    deadline: float | None = None,
    resume: dict[str, dict] | None = None,
) -> tuple[dict, dict, dict]:
    """MiniPrompt on the candidates' rows, `width` at a time sharing forwards: their new rows by span_id,
    the steps, forwards and seconds of the searches by stage (deciding, shrinking) summed, and the
    searches the `deadline` (a time.time() instant: the search budget's end) cut or kept from starting,
    {span_id: {"steps", "forwards", "search_s"} spent on it, "resume": where it stood (search/resume.py)},
    which get no row; `resume`: such a record of an earlier run, {span_id: its "resume"}, the searches
    go on from. `decided`:
    {span_id: the prompt its verdict-only search found}, which these searches shrink from. A span that
    raises is a failed row, never a lost unit. `stage`: the unit's kind, recorded with every attempt;
    `observer` sees the searches move (run/heartbeat.py)."""
    decided, resume = decided or {}, resume or {}
    jobs = [
        (
            SearchRequest(
                r["text"],
                r["target_ids"],
                _known(r["certificate_prompt"], decided.get(r["span_id"])),
                Resume.from_json(resume.get(r["span_id"])),
            ),
            replace(config.search, seed=span_seed(config.search.seed, r["span_id"])),
        )
        for r in rows
    ]
    searched, stages, cut = {}, {}, {}
    for index, result in measure_many(engine, jobs, width, observer, deadline, stop.state):
        row = rows[index]
        if isinstance(result, Cut):
            where = result.resume or Resume.from_json(
                resume.get(row["span_id"])
            )  # not reached: the old record
            cut[row["span_id"]] = {
                "steps": result.steps,
                "forwards": result.forwards,
                "search_s": result.seconds,
                **({"resume": where.to_json()} if where else {}),
            }
            log.info(
                "span %s: cut (%s) after %d GCG steps, %.2f s",
                row["span_id"],
                stop.reason() if stop.requested() else "search budget",
                result.steps,
                result.seconds,
            )
            continue
        if isinstance(result, Exception):
            log.error("span %s failed", row["span_id"], exc_info=result)
            searched[row["span_id"]] = failed_row(row, result)
        else:
            searched[row["span_id"]] = searched_row(row, result, result.wall_s, stage)
            _add_stages(stages, result.stages)
        _log_searched(searched[row["span_id"]])
    for row in rows:  # never started: the deadline had passed or a stop came (an earlier run's record stays)
        if row["span_id"] not in searched and row["span_id"] not in cut:
            earlier = {"resume": resume[row["span_id"]]} if resume.get(row["span_id"]) else {}
            cut[row["span_id"]] = {"steps": 0, "forwards": 0, "search_s": 0.0, **earlier}
    return searched, stages, cut


def _known(certificate: str | None, decided: str | None) -> Certificate | Decided | None:
    """What a span's search starts from: the prompt its verdict-only search found, with the span's
    certificate should that prompt no longer elicit it; else its certificate."""
    if decided:
        return Decided(decided, certificate)
    return Certificate(certificate) if certificate else None


def _add_stages(stages: dict, spent_by_stage: dict) -> None:
    """One search's {stage: steps, forwards, seconds} added to the unit's, counting the searches that
    reached each stage."""
    for name, spent in spent_by_stage.items():
        total = stages.setdefault(name, {"candidates": 0, **dict.fromkeys(spent, 0)})
        total["candidates"] += bool(spent["forwards"])
        for key, value in spent.items():  # a draft's figures are in the stages it ran in only
            total[key] = total.get(key, 0) + value


def _log_searched(row: dict) -> None:
    """One line per candidate as its result arrives, so a unit's log shows a long search moving."""
    outcome = (
        row["status"] if row["status"] == "failed" else "memorized" if row["memorized"] else "not_memorized"
    )
    tokens = row.get("prompt_tokens")
    log.info(
        "span %s: %s%s, %s, steps %d, %.2f s",
        row["span_id"],
        outcome,
        ", rejected early" if row.get("rejected_early") else "",
        "no prompt found" if tokens is None else f"prompt tokens {tokens}",
        row.get("steps") or 0,
        row.get("search_s") or 0.0,
    )


def calibrate(
    engine: HFEngine, rows: dict, docs: list[Document], config: ScanConfig, progress=lambda done, total: None
) -> dict:
    """The searched rows with compression ratios and, memorized ones, the calibrated verdict (by span_id);
    `progress(done, total)` follows the memorized spans calibrated."""
    return calibrate_rows(
        engine,
        rows,
        docs,
        config.calibration,
        model=config.model,
        prompt=config.prompt,
        context_tokens=config.screen.context_tokens,
        exact_window=resolve_window(engine, config.screen) == "exact",
        progress=progress,
    )


_TOKENIZE = object()  # screen_document's default: tokenize the document itself


def document_tokens(engine: HFEngine, doc: Document) -> tuple[list[int], list[tuple[int, int]]] | None:
    """The document as its spans are cut from it (ids, character offsets); None when it has no text."""
    return tokenize_document(doc.text, engine.tokenizer) if doc.text and doc.text.strip() else None


def screen_document(
    engine: HFEngine,
    doc: Document,
    config: ScanConfig,
    shard: int,
    tokenizer_id: str,
    budget: int | None = None,
    tokens=_TOKENIZE,
    work: ScreenWork | None = None,
) -> tuple[dict, list[Span]]:
    """Rows of one document's spans after the screen (by span_id, in order), and the spans chosen for
    search: at most `budget` (None: no global limit). `tokens`: document_tokens, when the caller has it;
    `work`: where the screen's forwarded tokens are counted."""
    tokens = document_tokens(engine, doc) if tokens is _TOKENIZE else tokens
    spans = make_spans(doc, engine.tokenizer, config.spans, tokenizer_id, tokens)
    tau = config.search.tau
    live = [s for s in spans if not s.skipped]
    extra = json.dumps(doc.extra, ensure_ascii=False, default=str) if doc.extra else None
    rows = {s.span_id: base_row(s, shard, tau, extra) for s in spans}
    if not live:
        return rows, []
    screen_engine = engine.screen_info()["engine"]
    screened = screen_with_anchors(engine, doc, tokens, live, config.spans, config.screen, tokenizer_id, work)
    live = [span for span, _, _ in screened]
    rows = {s.span_id: rows.get(s.span_id) or base_row(s, shard, tau, extra) for s in live}
    for span, result, each in screened:
        start = result.certificate_start
        cert = None if start is None else doc.text[tokens[1][start][0] : span.char_start]
        pz = extraction.columns(result.log_pz_topk, result.pz_greedy, config.screen.extraction)
        rows[span.span_id] = screened_row(rows[span.span_id], result, cert, each, screen_engine, pz)
    chosen = _choose(live, rows, config)
    if budget is not None:
        for span in chosen[budget:]:
            rows[span.span_id]["reason"] = "candidate budget spent (--max-candidates)"
        chosen = chosen[:budget]
    return rows, chosen


def _choose(live: list[Span], rows: dict, config: ScanConfig) -> list[Span]:
    """Candidates, best first (certificates, then greedy-match rate), capped per document."""

    def key(span: Span):
        row = rows[span.span_id]
        return (row["certificate_tokens"] is None, -(row["greedy_match_rate"] or 0.0), span.token_start)

    candidates = sorted((s for s in live if _is_candidate(rows[s.span_id], config)), key=key)
    if config.max_candidates_per_doc is not None:
        candidates = candidates[: config.max_candidates_per_doc]
    return sorted(candidates, key=lambda s: s.token_start)


def tokenizer_hash(tokenizer) -> str:
    return hashlib.sha256(tokenizer.backend_tokenizer.to_str().encode()).hexdigest()


def model_hash(model: str) -> str:
    """A cheap identity of a draft model's local weights: names and sizes of the files, and config.json's
    bytes (the scanned model's identity is its bytes: run/model_record.py, set by the Worker)."""
    path = Path(model)
    if not path.exists():
        return ""
    files = [path] if path.is_file() else sorted(p for p in path.iterdir() if p.is_file())
    digest = hashlib.sha256()
    for f in files:
        digest.update(f"{f.name}:{f.stat().st_size}".encode())
        if f.name == "config.json":
            digest.update(f.read_bytes())
    return digest.hexdigest()


def provenance(config: ScanConfig, engine: HFEngine) -> dict[bytes, bytes]:
    values = {
        "model": config.model.model,
        "model_revision": config.model.revision or "",
        "tokenizer_hash": tokenizer_hash(engine.tokenizer),
        "package_version": __version__,
        "config_hash": config_hash(run_identity(config.to_dict())),
        "bos": engine.template.bos_policy,
        "device": engine.device,
        "dtype": engine.dtype,
        "verify_engine": json.dumps(engine.verify_info(), sort_keys=True),
        "screen_engine": json.dumps(engine.screen_info(), sort_keys=True),
        "screen_window": json.dumps(
            window_info(engine, config.screen, config.spans.span_tokens), sort_keys=True
        ),
        "targets_per_forward": batched.width(engine, config.engines.targets_per_forward),
    }
    if engine.draft is not None:  # probe sampling: which draft, its tokenizer and what loading it cost
        values.update(
            draft_model=engine.draft_name,
            draft_model_hash=model_hash(engine.draft_name),
            draft_tokenizer_hash=tokenizer_hash(engine.draft.tokenizer),
            draft_load_s=round(engine.draft_load_s, 3),
        )
    return {k.encode(): str(v).encode() for k, v in values.items()}


def open_engine(config: ScanConfig) -> tuple[HFEngine, dict[bytes, bytes]]:
    """The one place a scan builds its engines (driver or Ray actor), with their provenance: vLLM
    first with its share of the GPU, then the HF model (engine/build.py)."""
    engine = build_engines(config.model, config.prompt, config.engines, config.search.gcg.draft.model)
    return engine, provenance(config, engine)


PENDING = "not searched yet"


def screen_shard(
    engine: HFEngine, shard: Shard, docs: list[Document], config: ScanConfig, meta: dict[bytes, bytes]
) -> tuple[pa.Table, dict]:
    """Phase 1 of a shard: every document screened; its candidates (after --max-candidates-per-doc) are
    rows with status not_searched, which phase 2 settles, searches or leaves (scanner/run/phases.py)."""
    start = time.perf_counter()
    tokenizer_id = meta[b"tokenizer_hash"].decode()[:16]
    rows: dict = {}
    corpus_tokens = (
        0  # the documents' tokens, for `status`'s tokens per second (the corpus's, not the model's)
    )
    work = ScreenWork()  # the model's tokens: corpus tokens times the re-encoding of windows and certificates
    for doc in docs:
        tokens = document_tokens(engine, doc)
        corpus_tokens += len(tokens[0]) if tokens else 0
        doc_rows, chosen = screen_document(
            engine, doc, config, shard.shard, tokenizer_id, tokens=tokens, work=work
        )
        for span in chosen:
            doc_rows[span.span_id].update(status="not_searched", reason=PENDING)
        rows.update(doc_rows)
    rows = list(rows.values())
    table = pa.Table.from_pylist(rows, schema=results_schema()).replace_schema_metadata(meta)
    counts = Counter(r["status"] for r in rows)
    stats = {
        "documents": len(docs),
        "spans": len(rows),
        "rows": len(rows),
        "status_counts": dict(counts),
        "candidates": counts["not_searched"],
        "memorized": 0,
        "seconds": time.perf_counter() - start,
        "screen_s": sum(r["screen_s"] for r in rows),
        "tokens": corpus_tokens,
        **work.to_dict(),
    }
    return table, stats


@contextlib.contextmanager
def task_log(path: Path):
    """Everything logged while a task runs also goes to its log file in logs/ (a shard's shard-NNNNN.log,
    a unit's by its name)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, mode="a", encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    level = root.level
    consoles = [(h, h.level) for h in root.handlers]
    for h, h_level in consoles:  # the file gets INFO; the terminal keeps the verbosity asked for
        h.setLevel(max(h_level, level))
    root.addHandler(handler)
    root.setLevel(min(level, logging.INFO))
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        for h, h_level in consoles:
            h.setLevel(h_level)
        handler.close()
