"""The recall audit's draw and the recall it states (run/phases.py calls these with its `Phases`;
measures/recall.py does the arithmetic).

The draw: once the budgeted search allows no more units, a seeded random sample, stratified along the
rank, of what no search decided (`population`) is saved in audit_plan.json with what it was drawn from
and searched in audit units outside the budget. Its size follows --audit-sample (config.parse_audit): a
count, or a share of the search's seconds or a time, bought at the scan's own measured seconds per
search and fixed when drawn, so a relaunch searches the same draw.

Only committed results are believed. When what the draw was made from changed (a relaunch with a
larger budget decided more) or --audit-sample did, the draw is discarded: its uncommitted parts and
audit_plan.json go, its committed parts stay. Their rows are searches like any other (a memorized find
stays in the results table) and decide their spans, which a new draw leaves out; the new draw's units are
numbered after them. recall.json is stated from the current draw's committed verdicts alone, and is
rebuilt whenever it is missing or says otherwise."""

from __future__ import annotations

import hashlib
import json
import logging
from collections import defaultdict

import pyarrow as pa
import pyarrow.compute as pc

from scanner.config import parse_audit
from scanner.measures import budget as bm
from scanner.measures import recall
from scanner.run import units as plans
from scanner.run.dropped import SortedIds, ranked_distinct
from scanner.run.tasks import Unit
from scanner.storage.atomic import atomic_write_json, remove_file
from scanner.storage.integrity import read_json_object
from scanner.storage.records import AUDIT_DRAW, read_record
from scanner.storage.rundir import AUDIT_PLAN, RECALL_FILE

log = logging.getLogger(__name__)

VERDICTS = ("memorized", "not_memorized")


def read_plan(run) -> dict:
    """audit_plan.json checked before it is believed (storage/records.py); {} when missing or not a draw
    (named in the log: the draw is made again)."""
    return read_record(run.path / AUDIT_PLAN, AUDIT_DRAW) or {}


def current(saved: dict) -> list[int]:
    """The audit part indices of the saved draw."""
    return list(range(saved["first"], saved["first"] + len(saved["units"]))) if saved else []


def earlier(phases, saved: dict) -> list[int]:
    """Committed audit parts of earlier draws: their rows stand, their spans are decided."""
    mine = set(current(saved))
    return [i for i in phases.stores["audit"].done_parts() if i not in mine]


def population(phases, kept: list[int]) -> dict[str, pa.Table]:
    """What the audit samples, one row per distinct target in rank order, as Arrow tables of span_id and
    shard: the candidates no certificate settled and no search decided (past the budget, or cut by it),
    and the spans the screen dropped (screened_out; run/dropped.py: millions of them at library scale);
    a target decided anywhere (an earlier draw's committed parts `kept` included) is
    decided for every copy."""
    decided = {
        r["span_id"]
        for name in ("search", "tighten")
        for r in phases.stores[name].rows()
        if r["status"] != "failed"
    } | plans.settled(phases)
    decided |= {r["span_id"] for r in phases.stores["audit"].rows(kept) if r["status"] != "failed"}
    ranked = bm.rank(plans.candidates(phases))
    known = {bm.target_key(r): r["span_id"] for r in ranked if r["span_id"] in decided}
    left, _ = bm.distinct([r for r in ranked if r["span_id"] not in decided], bm.target_key, known)
    known.update((bm.target_key(r), r["span_id"]) for r in ranked)
    paths = [phases.stores["screen"].result_path(s.shard) for s in phases.plan]
    left = pa.Table.from_pylist(
        [{"span_id": r["span_id"], "shard": r["shard"]} for r in left],
        schema=pa.schema([("span_id", pa.string()), ("shard", pa.int64())]),
    )
    return {"not_searched": left, "screened_out": ranked_distinct(paths, "screened_out", decided, set(known))}


def _ids(rows: pa.Table) -> pa.Array:
    return rows.column("span_id").combine_chunks()


def units(phases) -> list[Unit]:
    """The audit's units: the saved draw while what it was drawn from and --audit-sample stand, else a
    new one (the old discarded); none for --audit-sample 0, nor for `acr-scan plan`, which projects the
    audit (run/plan.py) and runs none."""
    if phases.draw is not None:
        return []
    config, saved = phases.config, read_plan(phases.run)
    rule = parse_audit(config.audit_sample)
    if rule.kind == "count" and rule.amount == 0:
        if saved or (phases.run.path / AUDIT_PLAN).exists():
            log.info(
                "--audit-sample 0: the recall audit's earlier draw is discarded (its committed finds stay)"
            )
            discard(phases, saved)
        return []
    kept = earlier(phases, saved)
    parts = population(phases, kept)
    if saved.get("key") != _key(parts, config):
        if saved:
            log.info("the recall audit's population or --audit-sample changed since its draw: drawn again")
        discard(phases, saved)
        now = earlier(phases, {})
        if now != kept:  # the discarded draw's committed parts now decide their spans
            parts = population(phases, now)
        saved = _draw(phases, parts, rule)
    return [Unit.from_json("audit", saved["first"] + i, items) for i, items in enumerate(saved["units"])]


def _key(parts: dict, config) -> str:
    """The digest of json.dumps([{part: [span ids]}, sample, seed]), streamed: no text of millions of ids."""
    digest = hashlib.sha256(b"[{")
    for n, (part, rows) in enumerate(parts.items()):
        digest.update(f"{', ' if n else ''}{json.dumps(part)}: [".encode())
        ids = _ids(rows)
        for start in range(0, len(ids), 65536):
            chunk = ids[start : start + 65536].to_pylist()
            digest.update(((", " if start else "") + ", ".join(map(json.dumps, chunk))).encode())
        digest.update(b"]")
    digest.update(f"}}, {json.dumps(str(config.audit_sample))}, {json.dumps(config.search.seed)}]".encode())
    return digest.hexdigest()


def _draw(phases, parts: dict, rule) -> dict:
    """A new draw of `parts`, its size bought by `rule` at what the search's committed units measured."""
    config, store = phases.config, phases.stores["audit"]
    cost = recall.search_cost(
        [phases.stores["search"].stats(i) for i in phases.stores["search"].done_parts()]
    )
    size, why = recall.audit_size(rule, cost)
    strata = recall.plan_strata(
        {part: _ids(rows) for part, rows in parts.items()}, size, config.search.seed, SortedIds
    )
    shard_of = _shards(parts, {span for s in strata for span in s["drawn"]})
    items = [[shard_of[span], span] for s in strata for span in s["drawn"]]
    first = max(store.done_parts(), default=-1) + 1
    saved = {
        "key": _key(parts, config),
        "sample": config.audit_sample,
        "seed": config.search.seed,
        "size": sum(len(s["drawn"]) for s in strata),
        "why": why,
        "cost": cost,
        "first": first,
        "strata": strata,
        "units": bm.units(items, config.unit_size),
    }
    atomic_write_json(phases.run.path / AUDIT_PLAN, saved)
    if saved["size"]:
        every = " (all there were)" if saved["size"] < size else ""
        log.info(
            "recall audit: %d searches drawn%s (--audit-sample %s: %s)",
            saved["size"],
            every,
            config.audit_sample,
            why,
        )
    else:
        log.info(
            "recall audit: none drawn, no recall stated (--audit-sample %s: %s); --audit-sample N asks for "
            "N searches",
            config.audit_sample,
            why,
        )
    return saved


def _shards(parts: dict, spans: set[str]) -> dict[str, int]:
    """{span_id: shard} of the drawn `spans`."""
    wanted = pa.array(sorted(spans), pa.string())
    return {
        r["span_id"]: r["shard"]
        for rows in parts.values()
        for r in rows.filter(pc.is_in(rows.column("span_id"), value_set=wanted)).to_pylist()
    }


def discard(phases, saved: dict) -> None:
    """The draw given up: its uncommitted parts, audit_plan.json and recall.json removed; its committed
    parts kept (their rows stand as searches). Written results are made pending, so they are written
    again without the discarded draw's marks."""
    store, drawn = (
        phases.stores["audit"],
        bool(saved.get("strata")) or (phases.run.path / AUDIT_PLAN).exists(),
    )
    done = store.done()
    for folder in store.folders():
        for path in folder.glob("*"):
            index = _index(path.stem)
            if path.is_file() and index is not None and index not in done:
                remove_file(path)
    remove_file(phases.run.path / AUDIT_PLAN)
    remove_file(phases.run.path / RECALL_FILE)
    if drawn:
        for shard in phases.run.done_shards():
            phases.run.reopen(shard)


def _index(stem: str) -> int | None:
    digits = stem.rsplit("-", 1)[-1]
    return int(digits) if digits.isdigit() else None


def committed(phases) -> dict[str, str]:
    """{span_id: its stratum} of the current draw's spans whose audit search committed a verdict."""
    saved = read_plan(phases.run)
    stratum = {span: s["name"] for s in saved.get("strata", []) for span in s["drawn"]}
    rows = phases.stores["audit"].rows(current(saved))
    return {
        r["span_id"]: stratum[r["span_id"]]
        for r in rows
        if r["status"] in VERDICTS and r["span_id"] in stratum
    }


def write_recall(phases) -> dict | None:
    """recall.json from the current draw's committed verdicts and the scan's memorized targets, written
    when missing or when it says otherwise; removed (None) when no audit verdict stands behind it."""
    saved, path = read_plan(phases.run), phases.run.path / RECALL_FILE
    searched = committed(phases)
    if not searched:
        remove_file(path)
        return None
    statuses = {r["span_id"]: r["status"] for r in phases.stores["audit"].rows(current(saved))}
    hits = defaultdict(int)
    for span, name in searched.items():
        hits[name] += statuses[span] == "memorized"
    strata = [{**s, "drawn": [span for span in s["drawn"] if span in searched]} for s in saved["strata"]]
    found = sum(
        1
        for s in phases.plan
        for r in phases.run.results.read(s.shard).select(["status", "searched_as"]).to_pylist()
        if r["status"] == "memorized" and r["searched_as"] is None
    )
    out = {
        **recall.summary(strata, hits, found),
        "sample": saved.get("sample"),
        "seed": saved.get("seed"),
        "planned": saved.get("size"),
        "strata_drawn": {s["name"]: s["drawn"] for s in strata},
    }
    if read_json_object(path) != json.loads(json.dumps(out)):
        atomic_write_json(path, out)
    return out


def cost_line(saved: dict, pending: list[Unit]) -> str:
    """What the audit about to run will cost, said before it starts."""
    left = sum(len(u.items) for u in pending)
    per = (saved.get("cost") or {}).get("per_search_s")
    eta = f", about {_minutes(left * per)} at {per:.1f} s a search measured by this scan" if per else ""
    return (
        f"recall audit: {left} of {saved.get('size', left)} searches to run{eta}, outside the search budget "
        f"(--audit-sample {saved.get('sample')}: {saved.get('why', '?')})"
    )


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"
