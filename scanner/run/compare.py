"""`acr-scan compare RUN --model B --out RUN_B`: the spans of scan RUN (model A) measured again on model B.

For each span A flagged (memorized or certified) and each control span A searched and found not memorized
(or the spans `--spans` lists), on B: the screen (greedy-match rate, p_z, the k-prefix completion test,
the natural-prefix certificate, checked by generation), MiniPrompt warm-started from A's prompt (checked
first; then GCG from it at its length, then the schedule's lengths: search/miniprompt.py warm_prompt) and
the same search cold, on the same budget, as the control that measures what the warm start saves. Each
span gets a row with both sides and its verdict class (measures/compare.py).

RUN_B is resumable as a scan's run directory is: compare.json (what is compared, checked on relaunch),
model.json (B's files by sha256, as a scan records its model's: run/model_record.py; a relaunch with other
bytes is refused, and every worker checks what it loaded against it), compare_plan.json (the units, saved
once), compare/ (each unit's rows, committed by the one Store protocol), then compare.parquet and
compare_summary.json once every unit is done. Units holding failed rows run again on relaunch. Tasks run
on the scan's executors (local, or Ray actors built from configs and paths only).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
import typing
from collections import defaultdict
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from scanner import stop
from scanner.config import DraftConfig, ExecutorConfig, ModelConfig, ScanConfig
from scanner.errors import InputError, require
from scanner.measures import budget as bm
from scanner.measures import compare as cm
from scanner.measures import extraction
from scanner.measures.overlap import token_string
from scanner.results.rows import base_row, failed_row, measured_prompt, screened_row, searched_row
from scanner.run.model_record import record_model, write_record
from scanner.schema.compare import COMPARE_VERSION, compare_schema
from scanner.storage.atomic import atomic_write, atomic_write_json
from scanner.storage.integrity import read_json_object
from scanner.storage.lock import run_lock
from scanner.storage.rundir import RunDir, changed_keys, foreign_entries
from scanner.storage.store import Store

log = logging.getLogger(__name__)

IDENTITY, PLAN, TABLE, SUMMARY = "compare.json", "compare_plan.json", "compare.parquet", "compare_summary.json"
STORE = "compare"
OWN = {IDENTITY, PLAN, TABLE, SUMMARY, STORE, "lock", "logs", "provenance.json", "model.json"}
FIX = "use a new --out, or relaunch with the options it was started with"
SAMPLE_SPANS = 256  # span texts of run A that B's tokenizer must cut as A's does (check_same_tokenizer)


@dataclass(frozen=True, kw_only=True)
class CompareConfig:
    """What a comparison is (no live objects): run A's folder and saved scan config, model B, the spans."""

    run: str  # run A's folder, resolved
    scan: ScanConfig  # run A's configuration with B's model (and no draft: a draft is of A's tokenizer)
    spans: tuple[str, ...] | None = None  # --spans; None: A's flagged and control spans
    targets: tuple[str, ...] | None = None  # --file's texts: the spans of run A that lie inside them
    tighten: bool = False  # shrink below each verdict (else both searches stop at their verdict)
    unit_size: int = 8

    def identity(self) -> dict:
        """What a relaunch must match: everything but where the run and corpus lie and the threads."""
        scan = dataclasses.asdict(self.scan)
        scan["model"] = {k: v for k, v in scan["model"].items() if k not in ("threads", "device")}
        scan["corpus"] = {k: v for k, v in scan["corpus"].items() if k != "path"}
        return json.loads(json.dumps({"version": COMPARE_VERSION, "scan": scan, "spans": self.spans,
                                      "targets": self.targets, "tighten": self.tighten, "unit_size": self.unit_size}))


def rebuild(cls, data: dict):
    """A frozen config dataclass from its saved JSON (nested configs rebuilt, lists made tuples where the
    field is a tuple); an unknown key is a damaged run_config.json (InputError)."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    require(not unknown, f"run_config.json: {cls.__name__} has no field(s) {unknown}; the run was made by another "
            "acr-scanner: compare it with that release")
    values = {}
    for key, value in data.items():
        hint = hints[key]
        if isinstance(value, dict) and dataclasses.is_dataclass(hint):
            value = rebuild(hint, value)
        elif isinstance(value, list) and (typing.get_origin(hint) is tuple or "tuple" in str(hint)):
            value = tuple(value)
        values[key] = value
    return cls(**values)


def saved_scan(run: RunDir) -> ScanConfig:
    return rebuild(ScanConfig, run.saved_config()["config"])


def compare_config(run_dir: str, model: ModelConfig, spans: tuple[str, ...] | None = None, tighten: bool = False,
                   unit_size: int = 8, corpus: str | None = None, template: dict | None = None,
                   targets: tuple[str, ...] | None = None) -> CompareConfig:
    """Run A's saved scan with B's model, no draft (of A's tokenizer), and the corpus where it lies now.
    `template`: B's chat, system_prompt, instruction where not None (the rest of A's template kept): B may
    be A itself behind a fixed prompt (in-context unlearning), measured under the template it is used with."""
    run = RunDir(run_dir)
    run.require_run()
    scan = saved_scan(run)
    search = replace(scan.search, gcg=replace(scan.search.gcg, draft=DraftConfig()))
    prompt = replace(scan.prompt, **{k: v for k, v in (template or {}).items() if v is not None})
    scan = replace(scan, model=model, search=search, prompt=prompt,
                   corpus=replace(scan.corpus, path=corpus) if corpus else scan.corpus)
    require(unit_size >= 1, f"--unit-size {unit_size} must be >= 1")
    require(spans is None or len(spans) > 0, "--spans names no span_id (it is empty); pass comma-separated span_id "
            "values of run A's results (acr-scan export RUN --all --out rows.csv lists them), or leave --spans out "
            "to compare A's flagged spans and its controls")
    require(spans is None or targets is None, "--spans and --file both choose the spans; pass one of them")
    return CompareConfig(run=str(Path(run_dir).resolve()), scan=scan, spans=spans, tighten=tighten, unit_size=unit_size,
                         targets=targets)


# ----------------------------------------------------------------------------------------------- selection

def selected(rows: list[dict], spans: tuple[str, ...] | None,
             targets: tuple[str, ...] | None = None) -> list[tuple[int, str, str]]:
    """(shard, span_id, selected_as) of the spans to measure, A's rank order: flagged first (best ACR first),
    then the controls; `spans`: exactly those (InputError naming an id the run does not hold); `targets`:
    the spans inside them (within_targets)."""
    if targets is not None:
        return within_targets(rows, targets)
    if spans is not None:
        by_id = {r["span_id"]: r for r in rows}
        unknown = [s for s in spans if s not in by_id]
        require(not unknown, f"--spans: {', '.join(map(repr, unknown[:3]))} not in the run's results; pass span_id "
                "values of its results table (acr-scan export RUN --all --out rows.csv lists them)")
        return [(by_id[s]["shard"], s, "listed") for s in dict.fromkeys(spans)]
    flagged = sorted((r for r in rows if r["status"] == "memorized"), key=lambda r: (-(r["acr"] or 0.0), r["span_id"]))
    controls = sorted((r for r in rows if r["status"] == "not_memorized"), key=lambda r: r["span_id"])
    kind = {"certificate_bound": "certified"}
    return [(r["shard"], r["span_id"], kind.get(r["acr_kind"], "memorized")) for r in flagged] + \
           [(r["shard"], r["span_id"], "control") for r in controls]


def within_targets(rows: list[dict], targets: tuple[str, ...]) -> list[tuple[int, str, str]]:
    """The spans of run A whose text lies inside a target text (an `acr --file` list), target by target, in
    the document's order; a target holding no span is an InputError naming it: A measured spans, not
    targets, so a target shorter than a span or absent from the corpus has nothing to compare."""
    order = sorted(rows, key=lambda r: (r["shard"], r["doc_row"] or "", r["char_start"], r["span_id"]))
    out: dict[str, tuple[int, str, str]] = {}
    for number, target in enumerate(targets, 1):
        inside = [r for r in order if r["text"] and r["text"] in target]
        require(inside, f"--file target {number} ({target[:40]!r}...) holds no span of the run; a target must be "
                "text of the scanned corpus at least one span (--span-tokens) long: scan a corpus that holds it "
                "(acr-scan ingest, then scan) and compare that run")
        out.update({r["span_id"]: (r["shard"], r["span_id"], "listed") for r in inside if r["span_id"] not in out})
    return list(out.values())


# ------------------------------------------------------------------------------------------------ one unit

@dataclass(frozen=True)
class CompareUnit:
    index: int
    items: tuple[tuple[int, str, str], ...]  # (shard, span_id, selected_as)

    @property
    def name(self) -> str:
        return f"compare-{self.index:05d}"


class CompareWorker:
    """Measures units on model B and commits them; the local executor's worker and each Ray actor's state
    (heavy objects are built in `setup()` where it runs, never pickled)."""

    def __init__(self, config: CompareConfig, out: str, seen: dict | None = None) -> None:
        self.config, self.out = config, Path(out)
        self.engine = self.meta = self.corpus = None
        self.seen = seen  # the driver's stamps of B's files, for a worker in its process only

    def setup(self, cpus: float | None = None) -> dict:
        from scanner.run.model_record import check_loaded
        from scanner.run.shard import open_engine
        from scanner.stages.read import open_corpus

        if cpus is not None and self.config.scan.model.threads is None:
            import torch

            torch.set_num_threads(max(1, int(cpus)))
        if self.engine is None:
            self.engine, self.meta = open_engine(self.config.scan)
            # As a scan's worker: the files just loaded are B's recorded bytes, or this worker measures nothing.
            self.meta[b"model_hash"] = check_loaded(self.out, self.config.scan.model, self.seen).encode()
        self.corpus = self.corpus or open_corpus(self.config.scan.corpus)
        return {k.decode(): v.decode() for k, v in self.meta.items()}

    def run_task(self, unit: CompareUnit) -> dict:
        from scanner.run.shard import shard_log

        if self.engine is None:
            self.setup()
        start = time.perf_counter()
        with shard_log(self.out / "logs" / f"{unit.name}.log"):
            rows = measure_unit(self.engine, self.config, unit, self._documents(unit))
        table = pa.Table.from_pylist(rows, schema=compare_schema())
        failed = sum(r["verdict_class"] == "failed" for r in rows)
        stats = {"unit": unit.name, "spans": len(rows), "failed": failed, "seconds": time.perf_counter() - start,
                 **{f"{side}_{k}": sum(r[f"{side}_{k}"] or 0 for r in rows)
                    for side in ("warm", "cold") for k in ("forwards", "steps", "s")}}
        Store(self.out, STORE, schema=compare_schema()).write(unit.index, table, stats)
        return {**stats, "pid": os.getpid()}

    def _documents(self, unit: CompareUnit) -> dict[str, object]:
        """{doc_row: Document} of the unit's spans' shards in run A's plan."""
        plan = RunDir(self.config.run).load_plan()
        return {d.row: d for shard in sorted({s for s, _, _ in unit.items})
                for d in self.corpus.documents(plan.shards[shard].doc_start, plan.shards[shard].doc_end)}

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()


def a_rows(config: CompareConfig, unit: CompareUnit) -> list[dict]:
    """Run A's rows of the unit's spans, in the unit's order."""
    results = RunDir(config.run).results
    wanted = defaultdict(set)
    for shard, span, _ in unit.items:
        wanted[shard].add(span)
    found = {r["span_id"]: r for shard, spans in wanted.items() for r in results.read(shard, spans).to_pylist()}
    return [found[span] for _, span, _ in unit.items]


def measure_unit(engine, config: CompareConfig, unit: CompareUnit, documents: dict) -> list[dict]:
    """Every span of the unit on B: screen and certificate, then the warm searches, then the cold ones
    (apart, so neither shares the other's forwards and each one's seconds are its own)."""
    rows = a_rows(config, unit)
    screened, texts = screen_on_b(engine, config.scan, rows, documents)
    warm = search_on_b(engine, config, rows, screened, texts, warm=True)
    cold = search_on_b(engine, config, rows, screened, texts, warm=False)
    return [compare_row(a, screened[a["span_id"]], warm.get(a["span_id"]), cold.get(a["span_id"]), selected_as)
            for a, (_, _, selected_as) in zip(rows, unit.items, strict=True)]


def _span(row: dict):
    from scanner.stages.spans import Span

    return Span(doc_id=row["doc_id"], doc_row=row["doc_row"] or "", span_id=row["span_id"], token_start=row["token_start"],
                token_end=row["token_end"], char_start=row["char_start"], char_end=row["char_end"], text=row["text"],
                target_ids=list(row["target_ids"]), anchored=bool(row.get("anchored")))


def screen_on_b(engine, scan: ScanConfig, rows: list[dict], documents: dict) -> tuple[dict, dict]:
    """{span_id: B's screened row (its certificate checked by generation: b_certificate)} and {doc_row:
    (text, token string)}. The k-prefix test runs on every span (certificate_min_match 0), so B's
    completion test is never left unrun."""
    from scanner.stages.screen import screen_spans
    from scanner.stages.spans import tokenize_document

    screen = replace(scan.screen, certificate_min_match=0.0)
    out, texts = {}, {}
    by_doc = defaultdict(list)
    for row in rows:
        by_doc[row["doc_row"]].append(row)
    for doc_row, group in by_doc.items():
        doc = documents.get(doc_row)
        if doc is None or not doc.text:
            for row in group:
                out[row["span_id"]] = failed_row(row, InputError(f"document {doc_row!r} is not in the corpus "
                                                 f"{scan.corpus.path}; pass --corpus where the scanned corpus lies"))
            continue
        ids, offsets = tokenize_document(doc.text, engine.tokenizer)
        texts[doc_row] = (doc.text, token_string(ids))
        for row in group:
            b = _screened(engine, scan, screen, row, doc, ids, offsets, screen_spans)
            if b.get("b_certificate"):  # whose words a certificate holds: the work's, measured as a search's
                b["b_certificate"] = measured_prompt(b["b_certificate"], scan.work_text_tokens, *texts[doc_row])
            out[row["span_id"]] = b
    return out, texts


def _screened(engine, scan: ScanConfig, screen, row: dict, doc, ids, offsets, screen_spans) -> dict:
    start = time.perf_counter()
    span = _span(row)
    try:
        require(ids[span.token_start:span.token_end] == span.target_ids, f"span {row['span_id']}: B's tokenizer cuts "
                "the document into other tokens than run A's; compare needs A's tokenizer")
        got = screen_spans(engine, ids, [span], screen)[0]
        cert = None if got.certificate_start is None else doc.text[offsets[got.certificate_start][0]:span.char_start]
        pz = extraction.columns(got.log_pz_topk, got.pz_greedy, scan.screen.extraction)
        b = screened_row(base_row(span, row["shard"], scan.search.tau), got, cert, 0.0,
                         engine.screen_info()["engine"], pz)
        b["b_certificate"] = _certificate(engine, b, scan)
    except Exception as err:  # noqa: BLE001 - one span's fault must not lose the unit; retried on relaunch
        log.error("span %s could not be screened on B", row["span_id"], exc_info=err)
        return failed_row(row, err, during="screen on B")
    b["screen_s"] = time.perf_counter() - start
    return b


def _certificate(engine, row: dict, scan: ScanConfig) -> dict | None:
    """The row B's natural-prefix certificate settles (checked by generation, ACR > tau), or {} where it
    does not, None where B's screen found none."""
    from scanner.run.tasks import certified_row

    if row["certificate_prompt"] is None:
        return None
    return certified_row(engine, row, scan) or {}


def search_on_b(engine, config: CompareConfig, rows: list[dict], screened: dict, texts: dict,
                warm: bool) -> dict[str, dict]:
    """{span_id: B's searched row}: MiniPrompt from A's prompt (`warm`), or from scratch; both with the
    span's seed and A's search options (the same budget). A span without an A prompt is searched cold only
    (its warm search would be the same search)."""
    from scanner.engine import batched
    from scanner.run.shard import span_seed
    from scanner.search.miniprompt import Target, measure_many

    search = replace(config.scan.search, verdict_only=not config.tighten)
    live = [r for r in rows if screened[r["span_id"]]["status"] != "failed" and (r["prompt"] or not warm)]
    jobs = [(Target(r["text"], None, list(r["target_ids"]), warm_prompt=r["prompt"] if warm else None),
             replace(search, seed=span_seed(search.seed, r["span_id"]))) for r in live]
    width = batched.width(engine, config.scan.engines.targets_per_forward)
    out = {}
    for index, result in measure_many(engine, jobs, width):
        row, b = live[index], screened[live[index]["span_id"]]
        if isinstance(result, Exception):
            log.error("span %s: the %s search on B failed", row["span_id"], "warm" if warm else "cold", exc_info=result)
            out[row["span_id"]] = failed_row(b, result, during=f"{'warm' if warm else 'cold'} search on B")
            continue
        # B's certificate is measured on its own (b_certificate): the searches neither start from it nor list it
        found = searched_row({**b, "certificate_prompt": None}, result, result.wall_s, "warm" if warm else "cold")
        out[row["span_id"]] = measured_prompt(found, config.scan.work_text_tokens,
                                              *texts.get(row["doc_row"], (None, None)))
    return out


# ----------------------------------------------------------------------------------------------- the row

def _side(prefix: str, row: dict | None) -> dict:
    keys = ("memorized", "acr", "acr_kind", "prompt", "prompt_tokens", "prompt_source", "min_margin",
            "generation_margin", "steps", "forwards")
    if not row or row.get("status") == "failed":
        return {f"{prefix}{k}": None for k in (*keys, "attempts")}
    out = {f"{prefix}{k}": row.get(k) for k in keys}
    out[f"{prefix}attempts"] = json.dumps(row.get("attempts") or [], sort_keys=True)
    return out


def _best(candidates: list[tuple[str, dict | None]]) -> tuple[str | None, dict | None]:
    """B's verdict: the shortest verified prompt among the certificate and the two searches (a memorized
    one before any other), the warm search's row where none elicits the span."""
    found = [(name, r) for name, r in candidates if r and r.get("status") != "failed" and r.get("prompt") is not None]
    if not found:
        return None, next((r for name, r in candidates if name == "warm" and r), None) or candidates[-1][1]
    return min(found, key=lambda nr: (not nr[1]["memorized"], nr[1]["prompt_tokens"]))


def compare_row(a: dict, b: dict, warm: dict | None, cold: dict | None, selected_as: str) -> dict:
    """One span's row of compare.parquet: A's side, B's (the best of certificate, warm, cold), both
    searches, the completion tests and the class."""
    failed = [r for r in (b, warm, cold) if r and r.get("status") == "failed"]
    certificate = b.get("b_certificate") or None
    warm = warm or (cold if not a["prompt"] else None)  # no A prompt: the warm search is the cold one
    origin, best = _best([("certificate", certificate), ("warm", warm), ("cold", cold)])
    a_completion = cm.completion(a["discoverable"], a["pz_greedy"])
    b_completion = cm.completion(b.get("discoverable"), b.get("pz_greedy"))
    b_memorized = None if failed else bool(best and best.get("memorized"))
    return {"span_id": a["span_id"], "doc_id": a["doc_id"], "shard": a["shard"], "char_start": a["char_start"],
            "char_end": a["char_end"], "text": a["text"], "target_tokens": a["target_tokens"],
            "selected_as": selected_as, "reason": failed[0]["reason"] if failed else None,
            "verdict_class": cm.verdict_class(a["status"] == "memorized", b_memorized, a_completion, b_completion),
            **_side("a_", a), "a_status": a["status"], "a_greedy_match_rate": a["greedy_match_rate"],
            "a_discoverable": a["discoverable"], "a_pz_greedy": a["pz_greedy"], "a_completion": a_completion,
            **_side("b_", None if failed else best),
            "b_status": "failed" if failed else ("memorized" if b_memorized else "not_memorized"),
            "b_prompt_origin": origin if b_memorized is not None and best and best.get("prompt") else None,
            "b_greedy_match_rate": b.get("greedy_match_rate"), "b_discoverable": b.get("discoverable"),
            "b_pz_greedy": b.get("pz_greedy"), "b_pz_topk": b.get("pz_topk"), "b_completion": b_completion,
            "b_certificate_tokens": b.get("certificate_tokens"),
            "b_certificate_verified": None if b.get("b_certificate") is None else bool(certificate),
            "b_screen_s": b.get("screen_s"), **_side("warm_", warm), **_side("cold_", cold),
            "warm_from_a": _warm_from_a(warm) if a["prompt"] else None,
            "warm_s": (warm or {}).get("search_s"), "cold_s": (cold or {}).get("search_s")}


def _warm_from_a(warm: dict | None) -> bool | None:
    """Whether A's prompt, checked on B first (the warm search's first attempt), elicited the span."""
    attempts = (warm or {}).get("attempts") or []
    first = next((x for x in attempts if x["warm"] == "previous" and x["steps"] == 0), None)
    return None if first is None else first["outcome"] == "success"


# ---------------------------------------------------------------------------------------------- the driver

def validate(config: CompareConfig, out: str) -> None:
    """Everything checked before a folder is made or a model loads: RUN_B is new, empty or this
    comparison's, and outside run A; B loads and shares A's tokenizer (its vocabulary, and how it cuts A's
    spans); its template can score a first token."""
    from scanner.engine.check import check_model, check_template

    folder, run = Path(out), Path(config.run)
    require(folder.resolve() != run, f"--out {out} is run A itself; pass a new folder for the comparison")
    require(run not in folder.resolve().parents, f"--out {out} is inside run A ({run}), whose folder is the scan's "
            f"alone; pass a folder outside it, e.g. {run.parent / (run.name + '-b')}")
    if folder.is_dir() and not (folder / IDENTITY).is_file():
        foreign = foreign_entries(folder, OWN, unrecorded=True)
        require(not foreign, f"--out {out} holds files that are not a comparison's ({', '.join(map(repr, foreign[:3]))}); "
                "pass a new --out")
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
        a_tokenizer, _ = load_tokenizer(rebuild(ModelConfig, saved))
    except (InputError, OSError, ValueError):
        a_tokenizer = None
    if a_tokenizer is not None:  # by vocabulary, then by behaviour: A's own spans cut into the same ids
        problems = vocabulary_problems(a_tokenizer, b_tokenizer) or \
            encoding_problems(a_tokenizer, b_tokenizer, span_texts(RunDir(config.run)))
    else:
        recorded = (read_json_object(Path(config.run) / "provenance.json") or {}).get("tokenizer_hash")
        problems = [] if recorded == tokenizer_hash(b_tokenizer) else [
            f"its tokenizer's hash differs from run A's ({str(recorded)[:12]}; A's model {saved['model']} cannot be "
            "loaded to compare vocabularies)"]
    require(not problems, f"--model {config.scan.model.model}: its tokenizer is not run A's ({'; '.join(problems)}); "
            "compare measures A's spans, cut into A's token ids, so B must share A's tokenizer (a fine-tuned, "
            "unlearned, quantized or distilled copy of A). For a model of another tokenizer, scan the corpus with it "
            "(acr-scan scan) and compare the two reports")


def span_texts(run: RunDir, limit: int = SAMPLE_SPANS) -> list[str]:
    """Up to `limit` of run A's span texts, spread over its first shards' spans (read shard by shard until
    there are four times as many): the texts B's tokenizer must cut into A's ids."""
    texts: list[str] = []
    for shard in run.done_shards():
        texts += [t for t in pq.read_table(run.result_path(shard), columns=["text"]).column("text").to_pylist() if t]
        if len(texts) >= 4 * limit:
            break
    return texts[::max(1, len(texts) // limit)][:limit]


def _check_identity(folder: Path, config: CompareConfig) -> None:
    path = folder / IDENTITY
    now = config.identity()
    saved = read_json_object(path)
    if saved is None:
        atomic_write_json(path, {**now, "run": config.run})
        return
    changed = changed_keys({k: v for k, v in saved.items() if k != "run"}, now)  # scan.prompt.instruction ...
    require(not changed, f"--out {folder} holds a comparison made with other options (changed: {', '.join(changed)}); "
            f"{FIX}")


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
    return [CompareUnit(i, tuple((int(s), str(span), str(kind)) for s, span, kind in items))
            for i, items in enumerate(saved["units"])]


def _pending(store: Store, units: list[CompareUnit]) -> list[CompareUnit]:
    for index in store.done_shards():  # failed rows are retried, as a scan's failed units are
        if store.stats(index).get("failed"):
            store.reopen(index)
    done = store.done()
    return [u for u in units if u.index not in done]


def open_executor(executor: ExecutorConfig, config: CompareConfig, folder: Path, units: int, seen: dict | None = None):
    """`seen`: the driver's stamps of B's files, for the local worker only (a Ray actor hashes them again)."""
    from scanner.executors.local import LocalExecutor

    def on_setup(meta: dict) -> None:
        atomic_write_json(folder / "provenance.json", dict(meta))

    if executor.kind == "local":
        return LocalExecutor(lambda: CompareWorker(config, str(folder), seen), on_setup)
    from scanner.executors.ray import RayExecutor

    return RayExecutor(executor, partial(CompareWorker, config, str(folder.resolve())), on_setup, expected_tasks=units)


def run_compare(config: CompareConfig, out: str, executor: ExecutorConfig | None = None) -> dict:
    """Measure the selected spans of run A on B into `out`; returns the summary (counts per class, the
    warm and cold searches' cost, both models' identities) and the tasks that failed for good."""
    validate(config, out)
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    with run_lock(folder):
        _check_identity(folder, config)
        store = Store(folder, STORE, schema=compare_schema())
        # B's identity is its bytes, as a scan's model's is: a relaunch with other bytes would mix two Bs.
        model = record_model(folder, config.scan.model, bool(store.done()), command="compare")
        write_record(folder, model)
        units = _units(folder, config)
        store.prepare()
        pending = _pending(store, units)
        log.info("%d of %d compare units still to run in %s", len(pending), len(units), folder)
        execute = open_executor(executor or ExecutorConfig(), config, folder, len(pending), model.seen)
        try:
            failed = execute(pending, None, lambda stats: log.info("%s: %d spans", stats["unit"], stats["spans"]))
        finally:
            report = execute.close()
        stop.check()  # SIGTERM / SIGUSR1: the units not run stay pending (scanner/stop.py)
        if failed or _pending(store, units):
            return {"failed": failed or {"units": "some spans failed; relaunch to retry them"}, "run": report}
        summary = write_table(folder, config, store, units)
    return {**summary, "failed": {}, "run": report}


def identities(config: CompareConfig, folder: Path) -> dict:
    """Both models as the runs recorded them: path or hub id, revision, file-hash identity, tokenizer hash,
    and the template each was measured under (B's differs from A's where compare was given --chat,
    --system-prompt or --instruction)."""
    keys = ("model", "model_revision", "model_hash", "tokenizer_hash", "dtype", "device", "package_version")
    a = read_json_object(Path(config.run) / "provenance.json") or {}
    b = read_json_object(folder / "provenance.json") or {}
    a_template = RunDir(config.run).saved_config()["config"].get("prompt")
    return {"a": {k: a.get(k) for k in keys} | {"run": config.run, "template": a_template},
            "b": {k: b.get(k) for k in keys} | {"template": dataclasses.asdict(config.scan.prompt)}}


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
    both = [r for r in rows if r["a_prompt"] and r["warm_memorized"] is not None and r["cold_memorized"] is not None]
    cost = {side: {k: sum(r[f"{side}_{k}"] or 0 for r in both) for k in ("forwards", "steps", "s")}
            for side in ("warm", "cold")}
    return {"spans": len(rows), "classes": cm.counts([r["verdict_class"] for r in rows]),
            "flagged_on_a": sum(r["a_status"] == "memorized" for r in rows),
            "warm_vs_cold": {"spans": len(both), **cost,
                             "a_prompt_reproduces": sum(bool(r["warm_from_a"]) for r in both),
                             "memorized_warm": sum(bool(r["warm_memorized"]) for r in both),
                             "memorized_cold": sum(bool(r["cold_memorized"]) for r in both)}}

