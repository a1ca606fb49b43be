"""Phase 3, in the driver: results/part-XXXXX.parquet per shard = the screen rows updated by the units'
rows (certify, search, audit, tighten, in the order they run), the copies of a decided span by the span
searched for them, every other place of a memorized span's tokens by that span (run/occurrences.py), and
the candidates never searched left not_searched with the reason; export/report/verify read only these.

Every function takes the driver's `Phases` (run/phases.py)."""

from __future__ import annotations

import logging
from collections import Counter, defaultdict

import pyarrow as pa
import pyarrow.parquet as pq

from scanner.results.rows import copied_row
from scanner.run import audit, occurrences
from scanner.run import units as plans
from scanner.run.spend import SEARCHED, cut
from scanner.run.tasks import UNIT_KINDS, Unit
from scanner.schema import results_schema

log = logging.getLogger(__name__)

COST = ("steps", "forwards", "search_s")  # what a span's searches spent, summed over decide and tighten
WAITED = "; it waited behind the candidates of passages not yet found, its own passage being found already"


def write_results(phases, units: list[Unit]) -> None:
    """results/part-XXXXX.parquet per shard, screen rows updated by the units' rows, the copies by the
    span searched for them, and every other place of a memorized span's tokens by that span."""
    updates, copies = _updates(phases), plans.copies(phases)
    verdicts = _verdicts(
        phases, set(copies) | {r["span_id"] for rows in updates.values() for r in rows}, updates
    )
    copy_of = {span: rep for rep, items in copies.items() for _, span in items}
    found = _elsewhere(phases, verdicts)
    holders = _holders(phases, verdicts, copies, found)
    reasons = _reasons(phases, units, copies)
    drawn = plans.read_plan(phases, plans.SEARCH_PLAN).get("drawn")
    left = (
        "not drawn into the plan's sample of the search"
        if drawn
        else "candidate budget spent (--max-candidates)"
    )
    screen, audited = phases.stores["screen"], audit.committed(phases)
    for shard in phases.plan:
        table = screen.read(shard.shard)
        rows = _final({r["span_id"]: r for r in table.to_pylist()}, updates[shard.shard])
        for span, row in rows.items():
            searched = verdicts.get(copy_of.get(span))
            if searched and searched[1]["status"] != "not_searched":
                rows[span] = copied_row(row, *searched)
        occurrences.apply(rows, found.get(shard.shard, []), verdicts, phases.config.search.tau)
        for row in rows.values():
            if row["status"] == "not_searched":
                row["reason"] = reasons.get(row["span_id"], left)
            if row["status"] == "memorized":
                row["copies_in_corpus"] = holders.get(row["searched_as"] or row["span_id"], 1)
            if row["span_id"] in audited and row["status"] != "not_searched":
                row["audit_stratum"] = audited[row["span_id"]]
        final = list(rows.values())  # the places found by text after the shard's own rows
        stats = screen.stats(shard.shard)
        seconds = stats.get("seconds", 0.0) + sum(r["search_s"] for r in final)
        out = pa.Table.from_pylist(final, schema=results_schema()).replace_schema_metadata(
            table.schema.metadata
        )
        phases.run.write_shard(shard.shard, out, results_stats(final, stats.get("documents", 0), seconds))


def results_stats(rows: list[dict], documents: int, seconds: float) -> dict:
    """A written shard's stats (stats/NNNNN.json, RunDir.shard_stats reads them), from its final rows."""
    counts = Counter(r["status"] for r in rows)
    return {
        "documents": documents,
        "spans": len(rows),
        "rows": len(rows),
        "status_counts": dict(counts),
        "candidates": counts["memorized"] + counts["not_memorized"] + counts["failed"],
        "memorized": counts["memorized"],
        "seconds": seconds,
        "calibrated_memorized": sum(bool(r["calibrated_memorized"]) for r in rows),
        "screen_s": sum(r["screen_s"] for r in rows),
        "search_s": sum(r["search_s"] for r in rows),
    }


def _reasons(phases, units: list[Unit], copies: dict) -> dict[str, str]:
    """Why each candidate that no search unit decided stays not_searched (its copies: the same)."""
    done = {kind: phases.stores[kind].done() for kind in SEARCHED}
    budget = f"--search-budget {phases.config.search_budget}"
    waits = set(plans.read_plan(phases, plans.SEARCH_PLAN).get("waits", []))
    out = {
        span: _cut_reason(budget, spent) + (WAITED if span in waits and not spent.get("steps") else "")
        for span, spent in cut(phases).items()
    }
    stop = phases.auto_stop()
    for unit in units:
        if unit.kind == "search" and unit.index not in done["search"]:
            why = f"not reached: the search budget ({budget}) was spent before its turn"
            if stop is not None and unit.index >= stop.unit:
                why = (
                    f"search stopped before search-{stop.unit:05d} by {budget}: {stop.why()}; a relaunch "
                    "with a fixed --search-budget searches it"
                )
            out.update({span: why + (WAITED if span in waits else "") for _, span in unit.spans})
    for rep, items in copies.items():
        if rep in out:
            out.update({span: out[rep] for _, span in items})
    return out


def _cut_reason(budget: str, spent: dict) -> str:
    """Why a search the budget cut stays undecided; one cut before its first GCG step was never reached."""
    if not spent.get("steps"):
        return (
            f"not reached: the search budget ({budget}) ran out before its search started; "
            "a relaunch with a larger budget searches it"
        )
    return (
        f"search budget spent during its search ({budget}, after {spent['steps']} GCG steps, "
        f"{spent['search_s']:.1f} s); a relaunch with a larger budget goes on from where it stood"
    )


def _better(old: dict, new: dict) -> dict:
    """A later unit's row for a span over an earlier one's. A verdict that only bounds the ACR (a
    certificate's, or a search's stopped at its verdict) gives way to a tightened prompt no longer than
    its own; else it stays, and a decision bound becomes the schedule's minimum, which that tightening
    found nothing below. Both units' costs count and both units' attempts are kept, in the order they ran
    (each names its stage), whichever prompt stands."""
    kind = old.get("acr_kind")
    if kind not in ("certificate_bound", "decision_bound"):
        return new
    if new["status"] == "failed":  # retried on resume; the verdict stands meanwhile
        return old
    cost = {k: (old.get(k) or 0) + (new.get(k) or 0) for k in COST}
    cost["attempts"] = [*(old.get("attempts") or []), *(new.get("attempts") or [])]
    shorter = new["prompt_tokens"] is not None and new["prompt_tokens"] <= (old["prompt_tokens"] or 0)
    if shorter:
        return {**new, **cost}
    return {**old, **cost, "acr_kind": "searched_min" if kind == "decision_bound" else kind}


def _updates(phases) -> dict[int, list[dict]]:
    """Every unit's row by shard, in the order units run (run/tasks.py UNIT_KINDS)."""
    by_shard = defaultdict(list)
    for name in UNIT_KINDS:
        for row in phases.stores[name].rows():
            by_shard[row["shard"]].append(row)
    return by_shard


def _final(rows: dict, updates: list[dict]) -> dict:
    for row in updates:
        rows[row["span_id"]] = _better(rows[row["span_id"]], row)
    return rows


def _verdicts(phases, copies, updates: dict) -> dict[str, tuple[dict, dict]]:
    """{span of `copies` (span_ids) a unit decided: (its screen row, its final row)}, for the copies to
    take from; a span no unit decided (cut by the budget) has none, and its copies stay candidates."""
    out = {}
    for shard, rows in updates.items():
        mine = [row for row in rows if row["span_id"] in copies]
        if not mine:
            continue
        screened = {
            r["span_id"]: r
            for r in phases.stores["screen"].read(shard, {r["span_id"] for r in mine}).to_pylist()
        }
        final = _final({k: dict(v) for k, v in screened.items()}, mine)
        out.update({span: (screened[span], final[span]) for span in screened})
    return out


def _elsewhere(phases, verdicts: dict) -> dict[int, list]:
    """{shard: [occurrences.Found]}: the other places of the corpus where a memorized span's tokens stand."""
    memorized = [
        final
        for _, final in verdicts.values()
        if final["status"] == "memorized" and not final.get("searched_as")
    ]
    if phases.corpus is None or not memorized:
        return {}
    from scanner.engine.loading import load_tokenizer  # the tokenizer only, no weights

    tokenizer = load_tokenizer(phases.config.model)[0]
    meta = pq.read_schema(phases.stores["screen"].result_path(phases.plan.shards[0].shard)).metadata or {}
    tokenizer_id = meta.get(b"tokenizer_hash", b"").decode()[:16]
    found = {
        s.shard: occurrences.find(
            phases.corpus.documents(s.doc_start, s.doc_end), s.shard, memorized, tokenizer, tokenizer_id
        )
        for s in phases.plan
    }
    log.info(
        "%d more places of %d memorized spans found by their text",
        sum(map(len, found.values())),
        len(memorized),
    )
    return found


def _holders(phases, verdicts: dict, copies: dict, found: dict) -> dict[str, int]:
    """{memorized span searched or certified: how many documents hold its tokens}: its own, its copies'
    of the plans and those of the places found by its text (results' copies_in_corpus)."""
    memorized = {span for span, (_, final) in verdicts.items() if final["status"] == "memorized"}
    docs = {span: {verdicts[span][1]["doc_row"]} for span in memorized}
    wanted = defaultdict(set)
    for rep in memorized:
        for shard, span in copies.get(rep, []):
            wanted[shard].add(span)
    rep_of = {span: rep for rep in memorized for _, span in copies.get(rep, [])}
    for shard, spans in wanted.items():
        for row in phases.stores["screen"].read(shard, spans).select(["span_id", "doc_row"]).to_pylist():
            docs[rep_of[row["span_id"]]].add(row["doc_row"])
    for places in found.values():
        for place in places:
            docs.setdefault(place.rep, set()).add(place.span.doc_row)
    return {rep: len(held) for rep, held in docs.items()}
