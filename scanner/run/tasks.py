"""The tasks of a scan and the worker that runs any of them where an executor puts it: a Shard is
screened (phase 1), a Unit certified or searched (phase 2), a PassagesTask builds passages.parquet (phase 4).

A unit is a few candidates, named by (shard, span_id), whose rows the worker reads from the screen
parts. A `certify` unit settles spans by their natural-prefix certificates: greedy generation from the
certificate string (HFEngine.verify, vLLM when attached) and, when it reproduces the span, the span is
memorized with acr = |y| / |c| (acr_kind certificate_bound) and no GCG step; a certificate refuted by
generation leaves no row, so its span stays an ordinary candidate; one whose check raised is a failed
row, and the search is not planned until a relaunch has checked it again. A `search` unit runs MiniPrompt on
its candidates (several targets per forward) and calibrates what it finds memorized, where the engine is.
"""

from __future__ import annotations

import logging
import os
import time
from collections import OrderedDict, defaultdict
from dataclasses import dataclass, field, replace

import pyarrow as pa

from scanner.config import PassageConfig, ScanConfig
from scanner.measures import acr as acr_math
from scanner.measures.compression import thresholds as compression_thresholds
from scanner.measures.overlap import token_string
from scanner.results.rows import certified_row as settled_by_certificate
from scanner.results.rows import failed_row, measured_prompt
from scanner.run.heartbeat import UnitProgress, task_beat
from scanner.run.passages import write_passages
from scanner.run.shard import calibrate, screen_shard, search_rows, task_log
from scanner.run.worker import ModelWorker
from scanner.schema import results_schema
from scanner.search.miniprompt import effective_cap
from scanner.search.progress import QUIET, SearchObserver, SearchProgress
from scanner.stages.spans import tokenize_document
from scanner.storage.rundir import RunDir, Shard
from scanner.storage.store import Store

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PassagesTask:
    """Phase 4 on a worker whose engine extends the passages by generation (run/passages.py)."""

    passages: PassageConfig
    name: str = "passages"


UNIT_KINDS = ("certify", "search", "audit", "tighten")  # phase 2's stores, in the order they run
TEXTS_KEPT = 16  # documents a worker keeps tokenized for measuring prompts (units of one book come in runs)


@dataclass(frozen=True)
class Unit:
    kind: str  # one of UNIT_KINDS
    index: int
    # (shard, span_id) in rank order; a tighten unit's items also carry the prompt to shrink from
    items: tuple[tuple, ...]
    # When the search budget ends (a time.time() instant, set by the phase that hands the unit out; None:
    # no seconds budget): searches still running then are cut within a step (search/driver.py run_many).
    deadline: float | None = field(default=None, compare=False)

    @property
    def name(self) -> str:
        return f"{self.kind}-{self.index:05d}"

    @property
    def spans(self) -> list[tuple[int, str]]:
        return [(shard, span) for shard, span, *_ in self.items]

    def decided(self) -> dict[str, str]:
        """{span_id: prompt} of a tighten unit's items (empty for the other kinds)."""
        return {item[1]: item[2] for item in self.items if len(item) > 2}

    def to_json(self) -> list:
        return [list(item) for item in self.items]

    @classmethod
    def from_json(cls, kind: str, index: int, data: list) -> Unit:
        return cls(kind, index, tuple((int(shard), str(span), *rest) for shard, span, *rest in data))


def heartbeat_name(task) -> str:
    """The name of a running task's heartbeat file, progress/<name>.json (run/heartbeat.py): a unit's is
    its progress record, which `status` shows; a screen shard's and the passages' only beat."""
    if isinstance(task, Shard):
        return f"screen-{task.shard:05d}"
    return task.name


def unit_search(config: ScanConfig, kind: str) -> ScanConfig:
    """The scan's config as a unit of `kind` searches: search units stop at each candidate's verdict
    (the fast schedule's first success is at most the decision length, so it proves ACR > tau, or
    follows the failure there that proved "not memorized"), as do the recall audit's (a verdict is what it
    counts), tighten units go on from it."""
    # The paper schedule's first success is no verdict (it starts short and grows: shrinking may still
    # raise the ACR above tau), so its searches run whole.
    verdict = kind in ("search", "audit") and config.search.schedule != "paper"
    return replace(config, search=replace(config.search, verdict_only=verdict))


def certified_row(engine, row: dict, config: ScanConfig) -> dict | None:
    """The row settled by its certificate, or None when generation refutes it or it proves too little."""
    return settled(engine, row, engine.verify(row["certificate_prompt"], list(row["target_ids"])), config)


def settled(engine, row: dict, check, config: ScanConfig) -> dict | None:
    """certified_row from the certificate's verification `check`."""
    tokens = len(check.prompt_ids or [])
    if not check.verified_generation or not tokens:
        return None
    cap = effective_cap(engine, row["target_tokens"], config.search)
    value = acr_math.acr(row["target_tokens"], tokens, cap)
    if not acr_math.is_memorized(value, config.search.tau, True):
        return None  # a bound at or below tau proves nothing: the search decides
    taus = {"tau": config.search.tau, **compression_thresholds(row["text"])}
    flags = acr_math.threshold_flags(value, True, taus)
    return settled_by_certificate(
        row, check, value, flags, engine.verify_info(), config.search.fragile_margin
    )


def _checks(engine, rows: list[dict]) -> list:
    """Every row's certificate verified in one batch of generations; if that raises, each row alone, so
    that only a row whose own check raises fails (its exception in its place)."""
    try:
        return engine.verify_each([(r["certificate_prompt"], list(r["target_ids"])) for r in rows])
    except Exception as err:  # noqa: BLE001 - which row's fault is found by checking each alone
        log.warning("certificates checked one at a time after the batch failed: %s", err)
    out = []
    for row in rows:
        try:
            out.append(engine.verify(row["certificate_prompt"], list(row["target_ids"])))
        except Exception as err:  # noqa: BLE001
            out.append(err)
    return out


def _certify(engine, rows: list[dict], config: ScanConfig, observer: SearchObserver = QUIET) -> dict:
    out = {}
    progress = [SearchProgress(index, row["target_tokens"]) for index, row in enumerate(rows)]
    for one in progress:
        observer.started(one)
    start = time.perf_counter()
    checks = _checks(engine, rows)
    each = (time.perf_counter() - start) / max(len(rows), 1)  # one batch: each row its share
    for row, check, one in zip(rows, checks, progress, strict=True):
        try:
            if isinstance(check, Exception):
                raise check
            result = settled(engine, row, check, config)
        except Exception as err:  # noqa: BLE001 - one span's fault must not lose the unit; retried on resume
            log.error("certificate of span %s could not be checked", row["span_id"], exc_info=err)
            result = failed_row(row, err, during="certificate")
        if result is not None:
            out[row["span_id"]] = {**result, "search_s": each}
        observer.finished(one)
    return out


OUTCOMES = ("memorized", "not_memorized", "rejected_early", "failed")  # disjoint: a cost model's split


def outcome(row: dict) -> str:
    """Which of OUTCOMES a unit's row is (rejected early: not memorized, stopped by the rejection rule)."""
    if row["status"] in ("memorized", "failed"):
        return row["status"]
    return "rejected_early" if row.get("rejected_early") else "not_memorized"


def unit_cost(rows: list[dict], stages: dict | None, verify_s: float) -> dict:
    """What a cost model needs of a unit, measured: candidates, steps, forwards and search seconds by
    outcome (summing to the rows'), by stage (the driver's attribution; None for certify units), the
    seconds of verifying generation and of calibration (the reference model's included)."""
    by = {name: {"candidates": 0, "steps": 0, "forwards": 0, "seconds": 0.0} for name in OUTCOMES}
    for row in rows:
        spent = by[outcome(row)]
        spent["candidates"] += 1
        spent["steps"] += row["steps"] or 0
        spent["forwards"] += row["forwards"] or 0
        spent["seconds"] += row["search_s"] or 0.0
    calibration = sum((r.get("calibration_s") or 0.0) + (r.get("reference_s") or 0.0) for r in rows)
    return {"outcomes": by, "stages": stages, "verify_s": verify_s, "calibration_s": calibration}


def measured_prompts(rows: dict, texts: dict, k: int) -> dict:
    """The unit's rows with their prompts measured against span and document (results/rows.py
    measured_prompt); `texts`: {doc_row: (text, token_string)} of the documents read, others against
    the span alone."""
    return {
        span: measured_prompt(row, k, *texts.get(row.get("doc_row"), (None, None)))
        for span, row in rows.items()
    }


def run_unit(
    engine,
    unit: Unit,
    rows: list[dict],
    config: ScanConfig,
    width: int,
    docs,
    texts=lambda rows: {},
    observer: SearchObserver = QUIET,
    resume: dict | None = None,
) -> tuple[pa.Table, dict]:
    """A unit's new rows (certified or searched, then calibrated, their prompts measured) and its stats;
    `docs(rows)` gives the documents calibration needs (only with a reference model), `texts(rows)` the
    documents' texts and token strings the prompts are measured against; `observer` sees its candidates
    move (run/heartbeat.py); `resume`: {span_id: where the budget cut its search in an earlier run}, to
    go on from there (search/resume.py)."""
    start, verified = time.perf_counter(), engine.verify_s  # calibration verifies too: read before it
    if unit.kind == "certify":
        new, stages, cut = _certify(engine, rows, config, observer), None, {}
    else:
        new, stages, cut = search_rows(
            engine,
            rows,
            unit_search(config, unit.kind),
            width,
            unit.decided(),
            unit.kind,
            observer,
            unit.deadline,
            resume,
        )
    verify_s = engine.verify_s - verified
    new.update(
        calibrate(
            engine,
            new,
            docs(new.values()),
            config,
            lambda done, total: observer.stage("calibration", done, total),
        )
    )
    new = measured_prompts(
        new, texts([r for r in new.values() if r["prompt"] is not None]), config.work_text_tokens
    )
    out = [new[r["span_id"]] for r in rows if r["span_id"] in new]
    table = pa.Table.from_pylist(out, schema=results_schema())
    stats = {
        "unit": unit.name,
        "candidates": len(rows),
        "settled": len(out) if unit.kind == "certify" else 0,
        "memorized": sum(r["status"] == "memorized" for r in out),
        "failed": sum(r["status"] == "failed" for r in out),
        "steps": sum(r["steps"] for r in out) + sum(c["steps"] for c in cut.values()),
        "search_s": time.perf_counter() - start,
        "forwards": sum(r["forwards"] for r in out) + sum(c["forwards"] for c in cut.values()),
        "cost": unit_cost(out, stages, verify_s),
        **({"cut": cut} if cut else {}),
    }
    return table, stats


def summed(old, new):
    """Two stats records of one unit added up (numbers summed, nested records alike): a unit resumed
    after a cut counts what both runs spent."""
    if isinstance(old, dict) and isinstance(new, dict):
        return {k: summed(old.get(k), new.get(k)) for k in {**old, **new}}
    if isinstance(old, (int, float)) and isinstance(new, (int, float)) and not isinstance(new, bool):
        return old + new
    return old if new is None else new


def resumed(
    kept: pa.Table, earlier: dict, table: pa.Table, stats: dict, candidates: int
) -> tuple[pa.Table, dict]:
    """A cut unit's rows and stats after its relaunch: the verdicts of the first run kept, the searches
    it cut added, what both spent summed (the budget counts both)."""
    merged = summed(
        {k: v for k, v in earlier.items() if k not in ("cut", "rows")},
        {k: v for k, v in stats.items() if k != "cut"},
    )
    merged.update(
        unit=stats["unit"], candidates=candidates, **({"cut": stats["cut"]} if stats.get("cut") else {})
    )
    return pa.concat_tables([kept, table.replace_schema_metadata(kept.schema.metadata)]), merged


class Worker(ModelWorker):
    """Runs any task of a scan and commits it: the local executor's worker and each Ray actor's state."""

    def __init__(self, config: ScanConfig, out: str, corpus=None, seen: dict | None = None) -> None:
        super().__init__(config, out, corpus, seen)
        self.run = RunDir(out)
        self._kept: OrderedDict[str, tuple[str, str]] = OrderedDict()  # documents' texts (_texts)

    def run_task(self, task) -> dict:
        self.ready()
        if isinstance(task, Shard):
            with task_beat(self.run.path, heartbeat_name(task)):
                return self._screen(task)
        if isinstance(task, PassagesTask):
            with task_beat(self.run.path, heartbeat_name(task)):
                table = write_passages(self.run, self.config, self.corpus, self.engine, task.passages)
            return {"task": task.name, "passages": table.num_rows, "pid": os.getpid()}
        store, rows = Store(self.run.path, task.kind), self._rows(task)
        earlier = store.stats(task.index) if task.index in store.done() else {}
        total = len(rows)
        if earlier.get(
            "cut"
        ):  # the budget cut it: the verdicts it reached stand, the cut searches go on from where they stood
            rows = [r for r in rows if r["span_id"] in earlier["cut"]]
        watcher = UnitProgress(self.run.path, task.name, [r["span_id"] for r in rows])
        try:
            with task_log(self.run.path / "logs" / f"{task.name}.log"):
                table, stats = run_unit(
                    self.engine,
                    task,
                    rows,
                    self.config,
                    int(self.meta[b"targets_per_forward"]),
                    self._docs,
                    self._texts,
                    watcher,
                    {s: c["resume"] for s, c in earlier.get("cut", {}).items() if c.get("resume")},
                )
            table = table.replace_schema_metadata(self.meta)
            if earlier.get("cut"):
                table, stats = resumed(store.read(task.index), earlier, table, stats, total)
            store.write(task.index, table, stats)
        finally:
            watcher.close()  # committed or failed: no longer running
        return {**stats, "pid": os.getpid()}

    def _screen(self, shard: Shard) -> dict:
        docs = self.corpus.documents(shard.doc_start, shard.doc_end)
        with task_log(self.run.log_path(shard.shard)):
            table, stats = screen_shard(self.engine, shard, docs, self.config, self.meta)
        Store(self.run.path, "screen").write(shard.shard, table, stats)
        return {**stats, "shard": shard.shard, "pid": os.getpid()}

    def _rows(self, unit: Unit) -> list[dict]:
        """The unit's candidates as the screen left them, in the unit's order."""
        by_shard = defaultdict(set)
        for shard, span in unit.spans:
            by_shard[shard].add(span)
        screen = Store(self.run.path, "screen")
        found = {
            r["span_id"]: r
            for shard, spans in by_shard.items()
            for r in screen.read(shard, spans).to_pylist()
        }
        return [found[span] for _, span in unit.spans]

    def _docs(self, rows) -> list:
        """Documents of the memorized rows' shards, read only when a reference model needs their context."""
        calibration = self.config.calibration
        shards = {r["shard"] for r in rows if r["status"] == "memorized"}
        if not (calibration.enabled and calibration.reference_model and shards):
            return []
        plan = self.run.load_plan()
        return [
            d
            for s in sorted(shards)
            for d in self.corpus.documents(plan.shards[s].doc_start, plan.shards[s].doc_end)
        ]

    def _texts(self, rows: list[dict]) -> dict[str, tuple[str, str]]:
        """{doc_row: (text, token string)} of the rows' documents, for measuring their prompts: read
        shard by shard and tokenized once while they stay among the last TEXTS_KEPT used."""
        wanted = {r["doc_row"]: r["shard"] for r in rows if r.get("doc_row")}
        missing = {key: shard for key, shard in wanted.items() if key not in self._kept}
        plan = self.run.load_plan() if missing else None
        for shard in sorted(set(missing.values())):
            for doc in self.corpus.documents(plan.shards[shard].doc_start, plan.shards[shard].doc_end):
                if doc.row in missing and doc.text:
                    ids, _ = tokenize_document(doc.text, self.engine.tokenizer)
                    self._kept[doc.row] = (doc.text, token_string(ids))
        for key in wanted:
            if key in self._kept:
                self._kept.move_to_end(key)
        while len(self._kept) > TEXTS_KEPT:
            self._kept.popitem(last=False)
        return {key: self._kept[key] for key in wanted if key in self._kept}
