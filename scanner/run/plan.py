"""Plan before you spend: screen a seeded random sample of the corpus's documents (--screen-sample, by
default all of them) with the scan's own options, settle what certificates prove, then search a
systematic sample (--sample) of the candidates the scan would search, and project the whole scan from
what the plan's run measured (scanner/measures/plan.py). The plan's run is an ordinary run directory,
PLAN_DIR/run, resumed like any scan; the screened documents are PLAN_DIR/sample.parquet.

--max-candidates caps the whole corpus's search: the plan draws from the candidates it would search
(scaled to the screened share), best first as the scan ranks them. --search-budget is not applied to
the plan's run: its drawn candidates are searched whole, and the projection says what the budget reaches.
Nor is the recall audit run: the projection counts the searches --audit-sample would add after the
budgeted search, at the drawn searches' measured seconds each."""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

from scanner.config import ExecutorConfig, PassageConfig, ScanConfig, parse_audit, parse_budget
from scanner.engine.check import check_model, check_template
from scanner.errors import InputError, require
from scanner.measures.plan import (
    check_workers,
    drawn_size,
    parse_sample,
    project,
    sample_size,
    search_figures,
    systematic,
)
from scanner.run.driver import run_scan
from scanner.run.tasks import outcome
from scanner.stages.read import open_corpus
from scanner.stages.sample import RECORD_FILE, SAMPLE_FILE, write_sample
from scanner.storage.cost import run_cost
from scanner.storage.integrity import read_json_object
from scanner.storage.passages import PASSAGES_FILE
from scanner.storage.rundir import CONFIG_FILE, PHASE_PLANS, RunDir, foreign_entries

CANDIDATE = ("memorized", "not_memorized", "not_searched", "failed")
RESULT_COLUMNS = [
    "doc_row",
    "token_end",
    "screen_s",
    "status",
    "acr_kind",
    "search_s",
    "steps",
    "rejected_early",
]
SEARCH_PLAN = PHASE_PLANS[1]


def screened_cap(config: ScanConfig, share: float) -> int | None:
    """--max-candidates scaled to `share`, the screened share of the documents (a count rounds up)."""
    most = config.max_candidates
    return most if not most else max(1, math.ceil(most * share))


def plan_config(config: ScanConfig, sample: Path, share: float) -> ScanConfig:
    """The scan's config on the screened documents: their corpus, --max-candidates scaled to their
    share, no --search-budget (the drawn candidates are searched whole; the projection applies it) and no
    recall audit (the projection counts it: measures/plan.py audit_figure)."""
    corpus = dataclasses.replace(config.corpus, path=str(sample))
    return dataclasses.replace(
        config, corpus=corpus, search_budget=None, audit_sample=0, max_candidates=screened_cap(config, share)
    )


class Draw:
    """The plan's draw from the search order (Phases' `draw`): a systematic sample of --sample's size,
    seeded; what it records is saved with the run's search plan. Holds only numbers (it crosses no wire)."""

    def __init__(self, kind: str, amount: float, seed: int) -> None:
        self.kind, self.amount, self.seed = kind, amount, seed

    def key(self) -> dict:
        return {"kind": self.kind, "amount": self.amount, "seed": self.seed}

    def __call__(self, order: list[dict]) -> tuple[list[dict], dict]:
        positions = systematic(len(order), drawn_size(self.kind, self.amount, len(order)), self.seed)
        return [order[i] for i in positions], {
            **self.key(),
            "population": len(order),
            "positions": positions,
            "spans": [order[i]["span_id"] for i in positions],
        }


def check_draw(run_dir: Path, draw: Draw) -> None:
    """A plan relaunched into the same --out must draw the same sample: its search plan is saved."""
    saved = (read_json_object(run_dir / SEARCH_PLAN) or {}).get("drawn")
    if saved and {k: saved.get(k) for k in draw.key()} != draw.key():
        raise InputError(
            f"{run_dir} holds a plan drawn with --sample {saved['amount']:g} ({saved['kind']}), seed "
            f"{saved['seed']}; this one asks {draw.amount:g} ({draw.kind}), seed {draw.seed}: give "
            "those again to resume it, or a new --out"
        )


def check_plan_folder(out: Path) -> None:
    """InputError unless --out is absent, empty or a plan's own folder: a plan never writes into a run
    directory or among others' files."""
    if not out.is_dir():
        return
    require(
        not (out / CONFIG_FILE).exists(),
        f"--out {out} is a scan's run directory; a plan writes into its own "
        "folder (sample.parquet, sample.json, run/): pass a new --out",
    )
    foreign = foreign_entries(out, {SAMPLE_FILE, RECORD_FILE, "run"})
    require(
        not foreign,
        f"--out {out} holds files that are not a plan's ({', '.join(map(repr, foreign[:3]))}); "
        "a plan writes into a new folder, an empty one or its own: pass a new --out",
    )


def plan_scan(
    config: ScanConfig,
    out: str,
    sample: str,
    *,
    workers: int,
    efficiency: float,
    executor: ExecutorConfig | None = None,
    passages: PassageConfig | None = None,
    progress=None,
    screen_sample: str = "1.0",
) -> dict:
    """Screen the sampled documents into out/run, search the drawn candidates, project; returns the
    projection with the sample's figures."""
    kind, amount = parse_sample(sample)  # before the corpus is read: bad options cost nothing
    screen_kind, screen_amount = parse_sample(screen_sample, "--screen-sample")
    check_workers(workers, efficiency)
    corpus = open_corpus(config.corpus)
    size = sample_size(screen_kind, screen_amount, corpus.num_rows, "--screen-sample")
    seed = config.search.seed
    draw, run_dir = Draw(kind, amount, seed), Path(out) / "run"
    check_plan_folder(Path(out))
    check_draw(run_dir, draw)
    check_model(config.model)  # a model the scan would refuse, refused before the sample is written
    check_template(config.model, config.prompt)
    path = write_sample(corpus, size, seed, out)
    share = size / corpus.num_rows if corpus.num_rows else 1.0
    stats = run_scan(
        plan_config(config, path, share), str(run_dir), progress, executor, passages=passages, draw=draw
    )
    run = RunDir(run_dir)
    cost = run_cost(run)
    docs = document_figures(run, path, config.corpus.text_column)
    budget = parse_budget(config.search_budget)
    whole = {"documents": corpus.num_rows, "bytes": corpus.text_bytes()}
    drawn = drawn_rows(run, cost)
    scale = whole["bytes"] / max(1, sum(d["bytes"] for d in docs))
    where = f"the {len(drawn['rows'])} drawn of the {drawn['population']} candidates the scan would search"
    if size < corpus.num_rows:
        where += f" in the screened documents, x{scale:.3g} (corpus bytes / screened bytes)"
    search = search_figures(drawn["rows"], drawn["population"], scale, where)
    projection = project(
        cost,
        docs,
        whole,
        workers=workers,
        efficiency=efficiency,
        seed=seed,
        budget=(budget.kind, budget.amount) if budget else None,
        max_candidates=config.max_candidates,
        search=search,
        every_document=size == corpus.num_rows,
        audit=parse_audit(config.audit_sample),
    )
    sampled = {
        "documents": size,
        "of": corpus.num_rows,
        "seed": seed,
        "bytes": sum(d["bytes"] for d in docs),
        "tokens": (cost.get("screen") or {}).get("corpus_tokens"),
        "path": str(path),
        "run": str(run_dir),
        "caps": _caps_text(config, share),
        "drawn": len(drawn["rows"]),
        "population": drawn["population"],
    }
    return {
        "sample": sampled,
        "corpus": {
            **whole,
            "source": "counted in the whole corpus: UTF-8 bytes of the text column (read, not tokenized)",
        },
        "inputs": inputs(cost, sampled, workers, efficiency, budget, config.max_candidates),
        "projection": projection,
        "failed": stats["run"]["failed_shards"],
    }


def _caps_text(config: ScanConfig, share: float) -> str:
    most = screened_cap(config, share)
    caps = "" if most is None else f", --max-candidates {most} of the screened documents"
    budget = (
        ""
        if config.search_budget is None
        else f"; --search-budget {config.search_budget} applied in the projection"
    )
    return f"drawn systematically along the rank{caps}{budget}"


def drawn_rows(run: RunDir, cost: dict) -> dict:
    """{population, rows}: the search plan's draw and, in rank order, each drawn candidate's outcome,
    steps and seconds (deciding and tightening summed, as its result row holds them, times the units'
    seconds over their rows': what a unit spends beside its rows' searches, measured)."""
    stages = [cost.get(k) or {} for k in ("search", "tighten")]
    rows_s = sum(s.get("seconds") or 0.0 for s in stages)
    overhead = (
        sum(s.get("unit_seconds") or s.get("seconds") or 0.0 for s in stages) / rows_s if rows_s else 1.0
    )
    drawn = (read_json_object(run.path / SEARCH_PLAN) or {}).get("drawn") or {"population": 0, "spans": []}
    table = run.read_results(["span_id", "status", "search_s", "steps", "rejected_early"]).to_pylist()
    rows = {r["span_id"]: r for r in table}
    out = [
        {
            "outcome": outcome(rows[span]),
            "steps": rows[span]["steps"] or 0,
            "seconds": (rows[span]["search_s"] or 0.0) * overhead,
        }
        for span in drawn["spans"]
        if span in rows and rows[span]["status"] != "not_searched"
    ]
    return {"population": drawn["population"], "rows": out}


def inputs(cost: dict, sampled: dict, workers: int, efficiency: float, budget, max_candidates) -> dict:
    """Every input of the projection with where it comes from."""
    where = f"measured in the sample ({sampled['documents']} of {sampled['of']} documents, seed {sampled['seed']})"
    screen, search = cost.get("screen") or {}, cost.get("search") or {}
    tokens = sampled["tokens"]
    measured = {
        "tokens_per_byte": tokens / sampled["bytes"] if tokens is not None and sampled["bytes"] else None,
        "screen_s_per_token": screen["seconds"] / tokens
        if tokens and screen.get("seconds") is not None
        else None,
        "reencoding": screen.get("reencoding"),
        "candidate_share": screen.get("candidate_share"),
        "settled_share": (cost.get("certify") or {}).get("settled_share"),
        "search_per_candidate": search.get("per_candidate"),
    }
    out = {name: {"value": value, "source": where} for name, value in measured.items()}
    out["workers"] = {"value": workers, "source": "given (--workers)"}
    out["parallel_efficiency"] = {
        "value": efficiency,
        "source": "assumed (--efficiency; bench/cluster/scale_model.py "
        "uses 0.85, measured by bench/cluster/scale.py), not measured by this sample",
    }
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
