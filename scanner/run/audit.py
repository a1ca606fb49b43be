"""The recall audit's draw and the recall it states (run/phases.py calls these; measures/recall.py does
the arithmetic).

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

from scanner.config import parse_audit
from scanner.measures import budget as bm
from scanner.measures import recall
from scanner.run.tasks import Unit
from scanner.storage.atomic import atomic_write_json, remove_file
from scanner.storage.integrity import read_json_object
from scanner.storage.rundir import AUDIT_PLAN, RECALL_FILE

log = logging.getLogger(__name__)

VERDICTS = ("memorized", "not_memorized")


def _strings(value) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _stratum(value) -> bool:
    return (isinstance(value, dict) and isinstance(value.get("name"), str) and isinstance(value.get("total"), int)
            and _strings(value.get("drawn")))


def _unit(value) -> bool:
    return isinstance(value, list) and all(isinstance(i, list) and len(i) == 2 and isinstance(i[0], int)
                                           and isinstance(i[1], str) for i in value)


def read_plan(run) -> dict:
    """audit_plan.json checked before it is believed; {} when missing, and when it is not a draw this
    release wrote (named in the log: the draw is made again)."""
    path = run.path / AUDIT_PLAN
    saved = read_json_object(path)
    if saved is None:
        if path.exists():
            log.warning("%s is not a JSON object: the recall audit is drawn again", path)
        return {}
    saved.setdefault("first", 0)  # a draw of an earlier release: its units from 0
    ok = (isinstance(saved.get("key"), str) and isinstance(saved["first"], int) and saved["first"] >= 0
          and isinstance(saved.get("strata"), list) and all(map(_stratum, saved["strata"]))
          and isinstance(saved.get("units"), list) and all(map(_unit, saved["units"])))
    if not ok:
        log.warning("%s is not a recall audit draw (a field is missing or of another type): drawn again", path)
        return {}
    return saved


def current(saved: dict) -> list[int]:
    """The audit part indices of the saved draw."""
    return list(range(saved["first"], saved["first"] + len(saved["units"]))) if saved else []


def earlier(phases, saved: dict) -> list[int]:
    """Committed audit parts of earlier draws: their rows stand, their spans are decided."""
    mine = set(current(saved))
    return [i for i in phases.stores["audit"].done_shards() if i not in mine]


def population(phases, kept: list[int]) -> dict[str, list[dict]]:
    """What the audit samples, one row per distinct target in rank order: the candidates no certificate
    settled and no search decided (past the budget, or cut by it), and the spans the screen dropped
    (screened_out); a target decided anywhere (an earlier draw's committed parts `kept` included) is
    decided for every copy."""
    decided = {r["span_id"] for name in ("search", "tighten") for r in phases.stores[name].rows()
               if r["status"] != "failed"} | phases.settled()
    decided |= {r["span_id"] for r in phases.stores["audit"].rows(kept) if r["status"] != "failed"}
    ranked = bm.rank(phases.candidates())
    known = {bm.target_key(r): r["span_id"] for r in ranked if r["span_id"] in decided}
    left, _ = bm.distinct([r for r in ranked if r["span_id"] not in decided], bm.target_key, known)
    known.update((bm.target_key(r), r["span_id"]) for r in ranked)
    dropped = [r for r in bm.rank(phases.candidates("screened_out")) if r["span_id"] not in decided]
    dropped, _ = bm.distinct(dropped, bm.target_key, known)
    return {"not_searched": left, "screened_out": dropped}


def units(phases) -> list[Unit]:
    """The audit's units: the saved draw while what it was drawn from and --audit-sample stand, else a
    new one (the old discarded); none for --audit-sample 0."""
    config, saved = phases.config, read_plan(phases.run)
    rule = parse_audit(config.audit_sample)
    if rule.kind == "count" and rule.amount == 0:
        if saved or (phases.run.path / AUDIT_PLAN).exists():
            log.info("--audit-sample 0: the recall audit's earlier draw is discarded (its committed finds stay)")
            discard(phases, saved)
        return []
    parts = population(phases, earlier(phases, saved))
    if saved.get("key") != _key(parts, config):
        if saved:
            log.info("the recall audit's population or --audit-sample changed since its draw: drawn again")
        discard(phases, saved)
        parts = population(phases, earlier(phases, {}))
        saved = _draw(phases, parts, rule)
    return [Unit.from_json("audit", saved["first"] + i, items) for i, items in enumerate(saved["units"])]


def _key(parts: dict, config) -> str:
    ids = {part: [r["span_id"] for r in rows] for part, rows in parts.items()}
    return hashlib.sha256(json.dumps([ids, str(config.audit_sample), config.search.seed]).encode()).hexdigest()


def _draw(phases, parts: dict, rule) -> dict:
    """A new draw of `parts`, its size bought by `rule` at what the search's committed units measured."""
    config, store = phases.config, phases.stores["audit"]
    cost = recall.search_cost([phases.stores["search"].stats(i) for i in phases.stores["search"].done_shards()])
    size, why = recall.audit_size(rule, cost)
    ids = {part: [r["span_id"] for r in rows] for part, rows in parts.items()}
    strata = recall.plan_strata(ids, size, config.search.seed)
    shard_of = {r["span_id"]: r["shard"] for rows in parts.values() for r in rows}
    items = [[shard_of[span], span] for s in strata for span in s["drawn"]]
    first = max(store.done_shards(), default=-1) + 1
    saved = {"key": _key(parts, config), "sample": config.audit_sample, "seed": config.search.seed,
             "size": sum(len(s["drawn"]) for s in strata), "why": why, "cost": cost, "first": first,
             "strata": strata, "units": bm.units(items, config.unit_size)}
    atomic_write_json(phases.run.path / AUDIT_PLAN, saved)
    if saved["size"]:
        every = " (all there were)" if saved["size"] < size else ""
        log.info("recall audit: %d searches drawn%s (--audit-sample %s: %s)", saved["size"], every,
                 config.audit_sample, why)
    else:
        log.info("recall audit: none drawn, no recall stated (--audit-sample %s: %s); --audit-sample N asks for "
                 "N searches", config.audit_sample, why)
    return saved


def discard(phases, saved: dict) -> None:
    """The draw given up: its uncommitted parts, audit_plan.json and recall.json removed; its committed
    parts kept (their rows stand as searches). Written results are made pending, so they are written
    again without the discarded draw's marks."""
    store, drawn = phases.stores["audit"], bool(saved.get("strata")) or (phases.run.path / AUDIT_PLAN).exists()
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
    return {r["span_id"]: stratum[r["span_id"]] for r in rows if r["status"] in VERDICTS and r["span_id"] in stratum}


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
    found = sum(1 for s in phases.plan for r in phases.run.results.read(s.shard).select(["status", "searched_as"])
                .to_pylist() if r["status"] == "memorized" and r["searched_as"] is None)
    out = {**recall.summary(strata, hits, found), "sample": saved.get("sample"), "seed": saved.get("seed"),
           "planned": saved.get("size"), "strata_drawn": {s["name"]: s["drawn"] for s in strata}}
    if read_json_object(path) != json.loads(json.dumps(out)):
        atomic_write_json(path, out)
    return out


def cost_line(saved: dict, pending: list[Unit]) -> str:
    """What the audit about to run will cost, said before it starts."""
    left = sum(len(u.items) for u in pending)
    per = (saved.get("cost") or {}).get("per_search_s")
    eta = f", about {_minutes(left * per)} at {per:.1f} s a search measured by this scan" if per else ""
    return (f"recall audit: {left} of {saved.get('size', left)} searches to run{eta}, outside the search budget "
            f"(--audit-sample {saved.get('sample')}: {saved.get('why', '?')})")


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"
