"""`acr-scan compare RUN --model B --out RUN_B`: the spans of scan RUN (model A) measured again on model B.

For each span A flagged (memorized or certified) and each control span A searched and found not memorized
(or the spans `--spans` lists), on B: the screen (greedy-match rate, p_z, the k-prefix completion test,
the natural-prefix certificate, checked by generation), MiniPrompt warm-started from A's prompt (checked
first; then GCG from it at its length, then the schedule's lengths: search/request.py Warm) and
the same search cold, on the same budget, as the control that measures what the warm start saves. Each
span gets a row with both sides and its verdict class (measures/compare.py).

RUN_B is resumable as a scan's run directory is: compare.json (what is compared, checked on relaunch),
model.json (B's files by sha256, as a scan records its model's: run/model_record.py; a relaunch with other
bytes is refused, and every worker checks what it loaded against it), compare_plan.json (the units, saved
once), compare/ (each unit's rows, committed by the one Store protocol), then compare.parquet and
compare_summary.json once every unit is done. Units holding failed rows run again on relaunch. The scan's
driver runs it (run/driver.py drive: the lock, the model record, the executor, local or Ray); what each
unit measures on B is run/compare_spans.py.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from scanner import stop
from scanner.config import CompareConfig, DraftConfig, ExecutorConfig, ModelConfig, from_saved
from scanner.errors import InputError, require
from scanner.measures import budget as bm
from scanner.measures import compare as cm
from scanner.run.compare_spans import STORE, CompareUnit, CompareWorker, selected
from scanner.run.driver import drive
from scanner.run.model_record import ModelRecord
from scanner.schema.compare import COMPARE_VERSION, compare_schema
from scanner.storage.atomic import atomic_write, atomic_write_json
from scanner.storage.integrity import read_json_object
from scanner.storage.rundir import RunDir, changed_keys, foreign_entries
from scanner.storage.store import Store

log = logging.getLogger(__name__)

IDENTITY, PLAN, TABLE, SUMMARY = (
    "compare.json",
    "compare_plan.json",
    "compare.parquet",
    "compare_summary.json",
)
OWN = {IDENTITY, PLAN, TABLE, SUMMARY, STORE, "lock", "logs", "progress", "provenance.json", "model.json"}
FIX = "use a new --out, or relaunch with the options it was started with"
SAMPLE_SPANS = 256  # span texts of run A that B's tokenizer must cut as A's does (check_same_tokenizer)


def compare_config(
    run_dir: str,
    model: ModelConfig,
    spans: tuple[str, ...] | None = None,
    tighten: bool = False,
    unit_size: int = 8,
    corpus: str | None = None,
    template: dict | None = None,
    targets: tuple[str, ...] | None = None,
) -> CompareConfig:
    """Run A's saved scan with B's model, no draft (of A's tokenizer), and the corpus where it lies now.
    `template`: B's chat, system_prompt, instruction where not None (the rest of A's template kept): B may
    be A itself behind a fixed prompt (in-context unlearning), measured under the template it is used with."""
    run = RunDir(run_dir)
    run.require_run()
    scan = run.scan_config()
    search = replace(scan.search, gcg=replace(scan.search.gcg, draft=DraftConfig()))
    prompt = replace(scan.prompt, **{k: v for k, v in (template or {}).items() if v is not None})
    scan = replace(
        scan,
        model=model,
        search=search,
        prompt=prompt,
        corpus=replace(scan.corpus, path=corpus) if corpus else scan.corpus,
    )
    require(unit_size >= 1, f"--unit-size {unit_size} must be >= 1")
    require(
        spans is None or len(spans) > 0,
        "--spans names no span_id (it is empty); pass comma-separated span_id "
        "values of run A's results (acr-scan export RUN --all --out rows.csv lists them), or leave --spans out "
        "to compare A's flagged spans and its controls",
    )
    require(spans is None or targets is None, "--spans and --file both choose the spans; pass one of them")
    return CompareConfig(
        run=str(Path(run_dir).resolve()),
        scan=scan,
        spans=spans,
        tighten=tighten,
        unit_size=unit_size,
        targets=targets,
    )


# ---------------------------------------------------------------------------------------------- the driver


def validate(config: CompareConfig, out: str) -> None:
    """Everything checked before a folder is made or a model loads: RUN_B is new, empty or this
    comparison's, and outside run A; B loads and shares A's tokenizer (its vocabulary, and how it cuts A's
    spans); its template can score a first token."""
    from scanner.engine.check import check_model, check_template

    folder, run = Path(out), Path(config.run)
    require(folder.resolve() != run, f"--out {out} is run A itself; pass a new folder for the comparison")
    require(
        run not in folder.resolve().parents,
        f"--out {out} is inside run A ({run}), whose folder is the scan's "
        f"alone; pass a folder outside it, e.g. {run.parent / (run.name + '-b')}",
    )
    if folder.is_dir() and not (folder / IDENTITY).is_file():
        foreign = foreign_entries(folder, OWN, unrecorded=True)
        require(
            not foreign,
            f"--out {out} holds files that are not a comparison's ({', '.join(map(repr, foreign[:3]))}); "
            "pass a new --out",
        )
    check_model(config.scan.model)
    check_same_tokenizer(config)
    check_template(config.scan.model, config.scan.prompt)


def check_same_tokenizer(config: CompareConfig) -> None:
    """B must cut A's spans into A's token ids: the same vocabulary at the same ids and the same special
    tokens (A's tokenizer loaded from its model where it still lies, else its hash in provenance.json)."""
    from scanner.engine.draft import encoding_problems, vocabulary_problems
    from scanner.engine.loading import load_tokenizer
    from scanner.run.shard import tokenizer_hash

    saved = RunDir(config.run).saved_config()["config"]["model"]
    b_tokenizer, _ = load_tokenizer(config.scan.model)
    try:
        a_tokenizer, _ = load_tokenizer(from_saved(ModelConfig, saved, "run A's run_config.json"))
    except (InputError, OSError, ValueError):
        a_tokenizer = None
    if a_tokenizer is not None:  # by vocabulary, then by behaviour: A's own spans cut into the same ids
        problems = vocabulary_problems(a_tokenizer, b_tokenizer) or encoding_problems(
            a_tokenizer, b_tokenizer, span_texts(RunDir(config.run))
        )
    else:
        recorded = (read_json_object(Path(config.run) / "provenance.json") or {}).get("tokenizer_hash")
        problems = (
            []
            if recorded == tokenizer_hash(b_tokenizer)
            else [
                f"its tokenizer's hash differs from run A's ({str(recorded)[:12]}; A's model {saved['model']} cannot be "
                "loaded to compare vocabularies)"
            ]
        )
    require(
        not problems,
        f"--model {config.scan.model.model}: its tokenizer is not run A's ({'; '.join(problems)}); "
        "compare measures A's spans, cut into A's token ids, so B must share A's tokenizer (a fine-tuned, "
        "unlearned, quantized or distilled copy of A). For a model of another tokenizer, scan the corpus with it "
        "(acr-scan scan) and compare the two reports",
    )


def span_texts(run: RunDir, limit: int = SAMPLE_SPANS) -> list[str]:
    """Up to `limit` of run A's span texts, spread over its first shards' spans (read shard by shard until
    there are four times as many): the texts B's tokenizer must cut into A's ids."""
    texts: list[str] = []
    for shard in run.done_shards():
        texts += [
            t for t in pq.read_table(run.result_path(shard), columns=["text"]).column("text").to_pylist() if t
        ]
        if len(texts) >= 4 * limit:
            break
    return texts[:: max(1, len(texts) // limit)][:limit]


def identity(config: CompareConfig) -> dict:
    """What a relaunch must match: everything but where the run and corpus lie and the threads."""
    scan = dataclasses.asdict(config.scan)
    scan["model"] = {k: v for k, v in scan["model"].items() if k not in ("threads", "device")}
    scan["corpus"] = {k: v for k, v in scan["corpus"].items() if k != "path"}
    return json.loads(
        json.dumps(
            {
                "version": COMPARE_VERSION,
                "scan": scan,
                "spans": config.spans,
                "targets": config.targets,
                "tighten": config.tighten,
                "unit_size": config.unit_size,
            }
        )
    )


def _check_identity(folder: Path, config: CompareConfig) -> None:
    path = folder / IDENTITY
    now = identity(config)
    saved = read_json_object(path)
    if saved is None:
        atomic_write_json(path, {**now, "run": config.run})
        return
    changed = changed_keys({k: v for k, v in saved.items() if k != "run"}, now)  # scan.prompt.instruction ...
    require(
        not changed,
        f"--out {folder} holds a comparison made with other options (changed: {', '.join(changed)}); {FIX}",
    )


def _units(folder: Path, config: CompareConfig) -> list[CompareUnit]:
    path = folder / PLAN
    saved = read_json_object(path)
    if saved is None:
        columns = ["span_id", "shard", "status", "acr", "acr_kind"]
        if config.targets is not None:
            columns += ["doc_row", "char_start", "text"]
        rows = RunDir(config.run).read_results(columns).to_pylist()
        items = selected(rows, config.spans, config.targets)
        saved = {"units": bm.units([list(i) for i in items], config.unit_size)}
        atomic_write_json(path, saved)
    return [
        CompareUnit(i, tuple((int(s), str(span), str(kind)) for s, span, kind in items))
        for i, items in enumerate(saved["units"])
    ]


def _pending(store: Store, units: list[CompareUnit]) -> list[CompareUnit]:
    for index in store.done_parts():  # failed rows are retried, as a scan's failed units are
        if store.stats(index).get("failed"):
            store.reopen(index)
    done = store.done()
    return [u for u in units if u.index not in done]


class CompareJob:
    """A comparison as the scan's driver runs it: units of run A's spans, each measured on B."""

    command, worker = "compare", CompareWorker

    def __init__(self, config: CompareConfig) -> None:
        self.config, self.model, self.corpus = config, config.scan.model, None
        self.units: list[CompareUnit] = []
        self.store: Store | None = None

    def validate(self, out: str) -> None:
        validate(self.config, out)

    def finished(self, folder: Path) -> bool:
        return bool(Store(folder, STORE, schema=compare_schema()).done())

    def open(self, folder: Path, model: ModelRecord) -> int:
        _check_identity(folder, self.config)
        self.store = Store(folder, STORE, schema=compare_schema())
        self.units = _units(folder, self.config)
        self.store.prepare()
        self.pending = _pending(self.store, self.units)
        log.info("%d of %d compare units still to run in %s", len(self.pending), len(self.units), folder)
        return len(self.pending)

    def run(self, execute) -> dict:
        failed = execute(
            self.pending, None, lambda stats: log.info("%s: %d spans", stats["unit"], stats["spans"])
        )
        stop.check()  # SIGTERM / SIGUSR1: the units not run stay pending (scanner/stop.py)
        return failed

    def result(self, folder: Path, failed: dict, report: dict) -> dict:
        if failed or _pending(self.store, self.units):
            return {"failed": failed or {"units": "some spans failed; relaunch to retry them"}, "run": report}
        return {**write_table(folder, self.config, self.store, self.units), "failed": {}, "run": report}


def run_compare(config: CompareConfig, out: str, executor: ExecutorConfig | None = None) -> dict:
    """Measure the selected spans of run A on B into `out`; returns the summary (counts per class, the
    warm and cold searches' cost, both models' identities) and the tasks that failed for good."""
    return drive(CompareJob(config), out, executor)


def identities(config: CompareConfig, folder: Path) -> dict:
    """Both models as the runs recorded them: path or hub id, revision, file-hash identity, tokenizer hash,
    and the template each was measured under (B's differs from A's where compare was given --chat,
    --system-prompt or --instruction)."""
    keys = ("model", "model_revision", "model_hash", "tokenizer_hash", "dtype", "device", "package_version")
    a = read_json_object(Path(config.run) / "provenance.json") or {}
    b = read_json_object(folder / "provenance.json") or {}
    a_template = RunDir(config.run).saved_config()["config"].get("prompt")
    return {
        "a": {k: a.get(k) for k in keys} | {"run": config.run, "template": a_template},
        "b": {k: b.get(k) for k in keys} | {"template": dataclasses.asdict(config.scan.prompt)},
    }


def write_table(folder: Path, config: CompareConfig, store: Store, units: list[CompareUnit]) -> dict:
    """compare.parquet (every unit's rows in plan order, both identities in its metadata) and
    compare_summary.json, each atomically."""
    tables = [store.read(u.index) for u in units]
    table = pa.concat_tables(tables) if tables else compare_schema().empty_table()
    summary = summarize(table.to_pylist())
    summary["models"] = identities(config, folder)
    metadata = {**(compare_schema().metadata or {}), b"models": json.dumps(summary["models"]).encode()}
    table = pa.Table.from_arrays(table.columns, schema=compare_schema().with_metadata(metadata))
    atomic_write(folder / TABLE, lambda f: pq.write_table(table, f))
    atomic_write_json(folder / SUMMARY, summary)
    return summary


def summarize(rows: list[dict]) -> dict:
    """Counts per class (and of the flagged spans alone), and what the warm start saved: the searches'
    forwards, steps and seconds, and the spans whose verdicts the two searches agree on."""
    both = [
        r
        for r in rows
        if r["a_prompt"] and r["warm_memorized"] is not None and r["cold_memorized"] is not None
    ]
    cost = {
        side: {k: sum(r[f"{side}_{k}"] or 0 for r in both) for k in ("forwards", "steps", "s")}
        for side in ("warm", "cold")
    }
    return {
        "spans": len(rows),
        "classes": cm.counts([r["verdict_class"] for r in rows]),
        "flagged_on_a": sum(r["a_status"] == "memorized" for r in rows),
        "warm_vs_cold": {
            "spans": len(both),
            **cost,
            "a_prompt_reproduces": sum(bool(r["warm_from_a"]) for r in both),
            "memorized_warm": sum(bool(r["warm_memorized"]) for r in both),
            "memorized_cold": sum(bool(r["cold_memorized"]) for r in both),
        },
    }
