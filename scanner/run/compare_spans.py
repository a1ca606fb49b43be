"""What `acr-scan compare` measures of each span of run A on model B (run/compare.py drives it).

Which spans (A's flagged and controls, `--spans`, or those inside `--file`'s targets), then per unit: the
screen on B (greedy-match rate, p_z, the k-prefix completion test, the natural-prefix certificate
checked by generation), MiniPrompt warm-started from A's prompt (search/request.py Warm) and
the same search cold on the same budget, the control that measures what the warm start saves; each span
one row with both sides and its verdict class (measures/compare.py).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import defaultdict
from dataclasses import dataclass, replace

import pyarrow as pa

from scanner.config import CompareConfig, ScanConfig
from scanner.errors import InputError, require
from scanner.measures import compare as cm
from scanner.measures import extraction
from scanner.measures.overlap import token_string
from scanner.results.rows import base_row, failed_row, measured_prompt, screened_row, searched_row
from scanner.run.worker import ModelWorker
from scanner.schema.compare import compare_schema
from scanner.storage.rundir import RunDir
from scanner.storage.store import Store

log = logging.getLogger(__name__)

STORE = "compare"  # the folder of committed units in RUN_B


# ----------------------------------------------------------------------------------------------- selection


def selected(
    rows: list[dict], spans: tuple[str, ...] | None, targets: tuple[str, ...] | None = None
) -> list[tuple[int, str, str]]:
    """(shard, span_id, selected_as) of the spans to measure, A's rank order: flagged first (best ACR first),
    then the controls; `spans`: exactly those (InputError naming an id the run does not hold); `targets`:
    the spans inside them (within_targets)."""
    if targets is not None:
        return within_targets(rows, targets)
    if spans is not None:
        by_id = {r["span_id"]: r for r in rows}
        unknown = [s for s in spans if s not in by_id]
        require(
            not unknown,
            f"--spans: {', '.join(map(repr, unknown[:3]))} not in the run's results; pass span_id "
            "values of its results table (acr-scan export RUN --all --out rows.csv lists them)",
        )
        return [(by_id[s]["shard"], s, "listed") for s in dict.fromkeys(spans)]
    flagged = sorted(
        (r for r in rows if r["status"] == "memorized"), key=lambda r: (-(r["acr"] or 0.0), r["span_id"])
    )
    controls = sorted((r for r in rows if r["status"] == "not_memorized"), key=lambda r: r["span_id"])
    kind = {"certificate_bound": "certified"}
    return [(r["shard"], r["span_id"], kind.get(r["acr_kind"], "memorized")) for r in flagged] + [
        (r["shard"], r["span_id"], "control") for r in controls
    ]


def within_targets(rows: list[dict], targets: tuple[str, ...]) -> list[tuple[int, str, str]]:
    """The spans of run A whose text lies inside a target text (an `acr --file` list), target by target, in
    the document's order; a target holding no span is an InputError naming it: A measured spans, not
    targets, so a target shorter than a span or absent from the corpus has nothing to compare."""
    order = sorted(rows, key=lambda r: (r["shard"], r["doc_row"] or "", r["char_start"], r["span_id"]))
    out: dict[str, tuple[int, str, str]] = {}
    for number, target in enumerate(targets, 1):
        inside = [r for r in order if r["text"] and r["text"] in target]
        require(
            inside,
            f"--file target {number} ({target[:40]!r}...) holds no span of the run; a target must be "
            "text of the scanned corpus at least one span (--span-tokens) long: scan a corpus that holds it "
            "(acr-scan ingest, then scan) and compare that run",
        )
        out.update(
            {r["span_id"]: (r["shard"], r["span_id"], "listed") for r in inside if r["span_id"] not in out}
        )
    return list(out.values())


# ------------------------------------------------------------------------------------------------ one unit


@dataclass(frozen=True)
class CompareUnit:
    index: int
    items: tuple[tuple[int, str, str], ...]  # (shard, span_id, selected_as)

    @property
    def name(self) -> str:
        return f"compare-{self.index:05d}"


class CompareWorker(ModelWorker):
    """Measures units on model B and commits them: the local executor's worker and each Ray actor's state."""

    def __init__(self, config: CompareConfig, out: str, corpus=None, seen: dict | None = None) -> None:
        super().__init__(config.scan, out, corpus, seen)
        self.compare = config

    def run_task(self, unit: CompareUnit) -> dict:
        from scanner.run.heartbeat import task_beat
        from scanner.run.shard import task_log

        self.ready()
        start = time.perf_counter()
        with task_beat(self.folder, unit.name), task_log(self.folder / "logs" / f"{unit.name}.log"):
            rows = measure_unit(self.engine, self.compare, unit, self._documents(unit))
        table = pa.Table.from_pylist(rows, schema=compare_schema())
        failed = sum(r["verdict_class"] == "failed" for r in rows)
        stats = {
            "unit": unit.name,
            "spans": len(rows),
            "failed": failed,
            "seconds": time.perf_counter() - start,
            **{
                f"{side}_{k}": sum(r[f"{side}_{k}"] or 0 for r in rows)
                for side in ("warm", "cold")
                for k in ("forwards", "steps", "s")
            },
        }
        Store(self.folder, STORE, schema=compare_schema()).write(unit.index, table, stats)
        return {**stats, "pid": os.getpid()}

    def _documents(self, unit: CompareUnit) -> dict[str, object]:
        """{doc_row: Document} of the unit's spans' shards in run A's plan."""
        plan = RunDir(self.compare.run).load_plan()
        return {
            d.row: d
            for shard in sorted({s for s, _, _ in unit.items})
            for d in self.corpus.documents(plan.shards[shard].doc_start, plan.shards[shard].doc_end)
        }


def a_rows(config: CompareConfig, unit: CompareUnit) -> list[dict]:
    """Run A's rows of the unit's spans, in the unit's order."""
    results = RunDir(config.run).results
    wanted = defaultdict(set)
    for shard, span, _ in unit.items:
        wanted[shard].add(span)
    found = {
        r["span_id"]: r for shard, spans in wanted.items() for r in results.read(shard, spans).to_pylist()
    }
    return [found[span] for _, span, _ in unit.items]


def measure_unit(engine, config: CompareConfig, unit: CompareUnit, documents: dict) -> list[dict]:
    """Every span of the unit on B: screen and certificate, then the warm searches, then the cold ones
    (apart, so neither shares the other's forwards and each one's seconds are its own)."""
    rows = a_rows(config, unit)
    screened, texts = screen_on_b(engine, config.scan, rows, documents)
    warm = search_on_b(engine, config, rows, screened, texts, warm=True)
    cold = search_on_b(engine, config, rows, screened, texts, warm=False)
    return [
        compare_row(a, screened[a["span_id"]], warm.get(a["span_id"]), cold.get(a["span_id"]), selected_as)
        for a, (_, _, selected_as) in zip(rows, unit.items, strict=True)
    ]


def _span(row: dict):
    from scanner.stages.spans import Span

    return Span(
        doc_id=row["doc_id"],
        doc_row=row["doc_row"] or "",
        span_id=row["span_id"],
        token_start=row["token_start"],
        token_end=row["token_end"],
        char_start=row["char_start"],
        char_end=row["char_end"],
        text=row["text"],
        target_ids=list(row["target_ids"]),
        anchored=bool(row.get("anchored")),
    )


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
                out[row["span_id"]] = failed_row(
                    row,
                    InputError(
                        f"document {doc_row!r} is not in the corpus "
                        f"{scan.corpus.path}; pass --corpus where the scanned corpus lies"
                    ),
                )
            continue
        ids, offsets = tokenize_document(doc.text, engine.tokenizer)
        texts[doc_row] = (doc.text, token_string(ids))
        for row in group:
            b = _screened(engine, scan, screen, row, doc, ids, offsets, screen_spans)
            if b.get("b_certificate"):  # whose words a certificate holds: the work's, measured as a search's
                b["b_certificate"] = measured_prompt(
                    b["b_certificate"], scan.work_text_tokens, *texts[doc_row]
                )
            out[row["span_id"]] = b
    return out, texts


def _screened(engine, scan: ScanConfig, screen, row: dict, doc, ids, offsets, screen_spans) -> dict:
    start = time.perf_counter()
    span = _span(row)
    try:
        require(
            ids[span.token_start : span.token_end] == span.target_ids,
            f"span {row['span_id']}: B's tokenizer cuts "
            "the document into other tokens than run A's; compare needs A's tokenizer",
        )
        got = screen_spans(engine, ids, [span], screen)[0]
        cert = (
            None
            if got.certificate_start is None
            else doc.text[offsets[got.certificate_start][0] : span.char_start]
        )
        pz = extraction.columns(got.log_pz_topk, got.pz_greedy, scan.screen.extraction)
        b = screened_row(
            base_row(span, row["shard"], scan.search.tau), got, cert, 0.0, engine.screen_info()["engine"], pz
        )
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


def search_on_b(
    engine, config: CompareConfig, rows: list[dict], screened: dict, texts: dict, warm: bool
) -> dict[str, dict]:
    """{span_id: B's searched row}: MiniPrompt from A's prompt (`warm`), or from scratch; both with the
    span's seed and A's search options (the same budget). A span without an A prompt is searched cold only
    (its warm search would be the same search)."""
    from scanner.engine import batched
    from scanner.run.shard import span_seed
    from scanner.search.miniprompt import measure_many
    from scanner.search.request import SearchRequest, Warm

    search = replace(config.scan.search, verdict_only=not config.tighten)
    live = [r for r in rows if screened[r["span_id"]]["status"] != "failed" and (r["prompt"] or not warm)]
    jobs = [
        (
            SearchRequest(r["text"], r["target_ids"], Warm(r["prompt"]) if warm else None),
            replace(search, seed=span_seed(search.seed, r["span_id"])),
        )
        for r in live
    ]
    width = batched.width(engine, config.scan.engines.targets_per_forward)
    out = {}
    for index, result in measure_many(engine, jobs, width):
        row, b = live[index], screened[live[index]["span_id"]]
        if isinstance(result, Exception):
            log.error(
                "span %s: the %s search on B failed",
                row["span_id"],
                "warm" if warm else "cold",
                exc_info=result,
            )
            out[row["span_id"]] = failed_row(b, result, during=f"{'warm' if warm else 'cold'} search on B")
            continue
        # B's certificate is measured on its own (b_certificate): the searches neither start from it nor list it
        found = searched_row(
            {**b, "certificate_prompt": None}, result, result.wall_s, "warm" if warm else "cold"
        )
        out[row["span_id"]] = measured_prompt(
            found, config.scan.work_text_tokens, *texts.get(row["doc_row"], (None, None))
        )
    return out


# ----------------------------------------------------------------------------------------------- the row


def _side(prefix: str, row: dict | None) -> dict:
    keys = (
        "memorized",
        "acr",
        "acr_kind",
        "prompt",
        "prompt_tokens",
        "prompt_source",
        "min_margin",
        "generation_margin",
        "steps",
        "forwards",
    )
    if not row or row.get("status") == "failed":
        return {f"{prefix}{k}": None for k in (*keys, "attempts")}
    out = {f"{prefix}{k}": row.get(k) for k in keys}
    out[f"{prefix}attempts"] = json.dumps(row.get("attempts") or [], sort_keys=True)
    return out


def _best(candidates: list[tuple[str, dict | None]]) -> tuple[str | None, dict | None]:
    """B's verdict: the shortest verified prompt among the certificate and the two searches (a memorized
    one before any other), the warm search's row where none elicits the span."""
    found = [
        (name, r)
        for name, r in candidates
        if r and r.get("status") != "failed" and r.get("prompt") is not None
    ]
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
    return {
        "span_id": a["span_id"],
        "doc_id": a["doc_id"],
        "shard": a["shard"],
        "char_start": a["char_start"],
        "char_end": a["char_end"],
        "text": a["text"],
        "target_tokens": a["target_tokens"],
        "selected_as": selected_as,
        "reason": failed[0]["reason"] if failed else None,
        "verdict_class": cm.verdict_class(
            a["status"] == "memorized", b_memorized, a_completion, b_completion
        ),
        **_side("a_", a),
        "a_status": a["status"],
        "a_greedy_match_rate": a["greedy_match_rate"],
        "a_discoverable": a["discoverable"],
        "a_pz_greedy": a["pz_greedy"],
        "a_completion": a_completion,
        **_side("b_", None if failed else best),
        "b_status": "failed" if failed else ("memorized" if b_memorized else "not_memorized"),
        "b_prompt_origin": origin if b_memorized is not None and best and best.get("prompt") else None,
        "b_greedy_match_rate": b.get("greedy_match_rate"),
        "b_discoverable": b.get("discoverable"),
        "b_pz_greedy": b.get("pz_greedy"),
        "b_pz_topk": b.get("pz_topk"),
        "b_completion": b_completion,
        "b_certificate_tokens": b.get("certificate_tokens"),
        "b_certificate_verified": None if b.get("b_certificate") is None else bool(certificate),
        "b_screen_s": b.get("screen_s"),
        **_side("warm_", warm),
        **_side("cold_", cold),
        "warm_from_a": _warm_from_a(warm) if a["prompt"] else None,
        "warm_s": (warm or {}).get("search_s"),
        "cold_s": (cold or {}).get("search_s"),
    }


def _warm_from_a(warm: dict | None) -> bool | None:
    """Whether A's prompt, checked on B first (the warm search's first attempt), elicited the span."""
    attempts = (warm or {}).get("attempts") or []
    first = next((x for x in attempts if x["warm"] == "previous" and x["steps"] == 0), None)
    return None if first is None else first["outcome"] == "success"
