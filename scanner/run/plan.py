"""Plan before you spend: scan a seeded random sample of the corpus with the scan's own options, then
project the whole scan from what the sample's run measured (scanner/measures/plan.py). The sample's
run is an ordinary run directory, PLAN_DIR/run, resumed like any scan; the sample is PLAN_DIR/sample.parquet.

--search-budget and --max-candidates cap the whole corpus's search; the sample runs under them scaled to
its share of the documents, so it searches what the capped scan would search of it: its best-ranked
candidates, which cost other than the average (a memorized one is decided in a few steps, a refuted one
takes the whole schedule). Without caps it searches every candidate it finds."""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

from scanner.config import ExecutorConfig, PassageConfig, ScanConfig, parse_budget
from scanner.measures.plan import check_workers, parse_sample, project, sample_size
from scanner.run.driver import run_scan
from scanner.run.tasks import outcome
from scanner.stages.read import open_corpus
from scanner.stages.sample import write_sample
from scanner.storage.cost import run_cost
from scanner.storage.passages import PASSAGES_FILE
from scanner.storage.rundir import RunDir

CANDIDATE = ("memorized", "not_memorized", "not_searched", "failed")
RESULT_COLUMNS = ["doc_row", "token_end", "screen_s", "status", "acr_kind", "search_s", "steps", "rejected_early"]


def sample_caps(config: ScanConfig, share: float) -> tuple[str | None, int | None]:
    """(--search-budget, --max-candidates) scaled to `share`, the sample's share of the documents."""
    budget, most = parse_budget(config.search_budget), config.max_candidates
    if budget is not None:
        amount = budget.amount * share
        budget = f"{max(1, round(amount))}steps" if budget.kind == "steps" else f"{max(amount, 1.0):.3f}s"
    return budget, most if not most else max(1, math.ceil(most * share))


def _caps_text(config: ScanConfig, share: float) -> str:
    budget, most = sample_caps(config, share)
    if budget is None and most is None:
        return "every candidate searched"
    caps = [f"--search-budget {budget}"] * (budget is not None) + [f"--max-candidates {most}"] * (most is not None)
    return f"searched under the caps scaled to its share {share:.3g}: {', '.join(caps)}"


def sample_config(config: ScanConfig, sample: Path, share: float) -> ScanConfig:
    """The scan's config on the sample: its corpus, and the caps on the search scaled to its share."""
    corpus = dataclasses.replace(config.corpus, path=str(sample))
    budget, most = sample_caps(config, share)
    return dataclasses.replace(config, corpus=corpus, search_budget=budget, max_candidates=most)


def plan_scan(config: ScanConfig, out: str, sample: str, *, workers: int, efficiency: float,
              executor: ExecutorConfig | None = None, passages: PassageConfig | None = None,
              progress=None) -> dict:
    """Sample, scan the sample into out/run, project; returns the projection with the sample's figures."""
    kind, amount = parse_sample(sample)  # before the corpus is read: a bad --sample costs nothing
    check_workers(workers, efficiency)
    corpus = open_corpus(config.corpus)
    size = sample_size(kind, amount, corpus.num_rows)
    seed = config.search.seed
    path = write_sample(corpus, size, seed, out)
    run_dir = Path(out) / "run"
    share = size / corpus.num_rows if corpus.num_rows else 1.0
    stats = run_scan(sample_config(config, path, share), str(run_dir), progress, executor, passages=passages)
    run = RunDir(run_dir)
    cost = run_cost(run)
    docs = document_figures(run, path, config.corpus.text_column)
    budget = parse_budget(config.search_budget)
    whole = {"documents": corpus.num_rows, "bytes": corpus.text_bytes()}
    projection = project(cost, docs, whole, workers=workers, efficiency=efficiency, seed=seed,
                         budget=(budget.kind, budget.amount) if budget else None,
                         max_candidates=config.max_candidates, capped_sample=bool(budget or config.max_candidates))
    sampled = {"documents": size, "of": corpus.num_rows, "seed": seed, "bytes": sum(d["bytes"] for d in docs),
               "tokens": (cost.get("screen") or {}).get("corpus_tokens"), "path": str(path), "run": str(run_dir),
               "caps": _caps_text(config, share)}
    return {"sample": sampled, "corpus": {**whole, "source": "counted in the whole corpus: UTF-8 bytes of the text "
                                          "column (read, not tokenized)"},
            "inputs": inputs(cost, sampled, workers, efficiency, budget, config.max_candidates),
            "projection": projection, "failed": stats["run"]["failed_shards"]}


def inputs(cost: dict, sampled: dict, workers: int, efficiency: float, budget, max_candidates) -> dict:
    """Every input of the projection with where it comes from."""
    where = f"measured in the sample ({sampled['documents']} of {sampled['of']} documents, seed {sampled['seed']})"
    screen, search = cost.get("screen") or {}, cost.get("search") or {}
    tokens = sampled["tokens"]
    measured = {
        "tokens_per_byte": tokens / sampled["bytes"] if tokens is not None and sampled["bytes"] else None,
        "screen_s_per_token": screen["seconds"] / tokens if tokens and screen.get("seconds") is not None else None,
        "reencoding": screen.get("reencoding"), "candidate_share": screen.get("candidate_share"),
        "settled_share": (cost.get("certify") or {}).get("settled_share"),
        "search_per_candidate": search.get("per_candidate")}
    out = {name: {"value": value, "source": where} for name, value in measured.items()}
    out["workers"] = {"value": workers, "source": "given (--workers)"}
    out["parallel_efficiency"] = {"value": efficiency, "source": "assumed (--efficiency; bench/scale_model.py "
                                  "uses 0.85, measured by bench/scale.py), not measured by this sample"}
    out["search_budget"] = {"value": str(budget) if budget else None, "source": "given (--search-budget)"}
    out["max_candidates"] = {"value": max_candidates, "source": "given (--max-candidates)"}
    return out


def document_figures(run: RunDir, sample: Path, text_column: str) -> list[dict]:
    """Per sampled document: bytes, tokens (the furthest token any of its rows reaches: exact unless
    --allow-gaps leaves a tail unscanned), screen seconds, candidates, certified, search by outcome, and
    passages with their extension seconds; the bootstrap's units (scanner/measures/plan.py)."""
    lengths = pc.binary_length(pq.read_table(sample, columns=[text_column]).column(0)).to_pylist()
    docs = [defaultdict(float, bytes=n or 0) for n in lengths]
    for row in run.read_results(RESULT_COLUMNS).to_pylist():
        doc = docs[_index(row["doc_row"])]
        doc["tokens"] = max(doc["tokens"], row["token_end"] or 0)
        doc["screen_s"] += row["screen_s"] or 0.0
        if row["status"] not in CANDIDATE:
            continue
        doc["candidates"] += 1
        if row["acr_kind"] == "certificate_bound":
            doc["certified"] += 1
            doc["certify_s"] += row["search_s"] or 0.0
        elif row["status"] == "not_searched":
            doc["not_searched"] += 1
        else:
            name = outcome(row)
            doc[f"{name}.candidates"] += 1
            doc[f"{name}.steps"] += row["steps"] or 0
            doc[f"{name}.seconds"] += row["search_s"] or 0.0
            doc["search_s"] += row["search_s"] or 0.0
            doc["steps"] += row["steps"] or 0
    _passages(run, docs)
    return [dict(d) for d in docs]


def _passages(run: RunDir, docs: list) -> None:
    path = run.path / PASSAGES_FILE
    if path.is_file():
        for row in pq.read_table(path, columns=["doc_row", "extend_s"]).to_pylist():
            if row["doc_row"] is not None:
                docs[_index(row["doc_row"])]["passages"] += 1
                docs[_index(row["doc_row"])]["passage_s"] += row["extend_s"] or 0.0


def _index(doc_row: str) -> int:
    # '<file>:<row>' of the one-file sample corpus: the row is the document's place in the sample.
    return int(doc_row.rsplit(":", 1)[1])
