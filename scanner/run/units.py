"""The units of phase 2, planned from what the screen committed (run/phases.py runs them): certify units,
search units, tighten units (the audit's are run/audit.py's); each plan saved once beside
run_config.json, so a relaunch runs the same units.

Candidates whose natural-prefix certificate is shorter than the span are settled by generation from the
certificate (certify units, no budget, no GCG); then all other candidates, ranked corpus-wide by screen
evidence (measures/budget.py), are decided best-first in search units of --unit-size: each search stops
at its verdict (the first verified prompt, or "not memorized"). Only when every candidate has its verdict
do tighten units shrink the decided prompts, best bound first (--tighten: the certified spans too).

A span's search depends only on its target tokens: identical targets (a header every book carries, a
quotation, a second edition) are certified or searched once, by their best-ranked copy, and the other
copies take its verdict (searched_as); copies count once against the budget.

Every function takes the driver's `Phases` (run/phases.py): its config, run directory, shard plan,
stores and, for `acr-scan plan`, its draw."""

from __future__ import annotations

import logging

import pyarrow as pa
import pyarrow.parquet as pq

from scanner.measures import budget as bm
from scanner.run import dropped
from scanner.run.tasks import UNIT_KINDS, Unit
from scanner.schema import RANK_COLUMNS
from scanner.storage.atomic import atomic_write_json
from scanner.storage.records import AUDIT_DRAW, UNITS_PLAN, read_record
from scanner.storage.rundir import AUDIT_PLAN, PHASE_PLANS

CERTIFY_PLAN, SEARCH_PLAN, TIGHTEN_PLAN = (
    PHASE_PLANS  # saved once, beside run_config.json (storage/rundir.py)
)
log = logging.getLogger(__name__)
POSITION = ("doc_row", "token_start", "token_end")  # where a span stands: its passage's neighbours


def read_plan(phases, name: str, make=None) -> dict:
    """The saved plan `name`, checked before it is believed; a missing or bad one is made again by
    `make()` and saved ({} without `make`)."""
    path = phases.run.path / name
    saved = read_record(path, AUDIT_DRAW if name == AUDIT_PLAN else UNITS_PLAN)  # a bad one: made again
    if saved is None and make is not None:
        saved = make()
        atomic_write_json(path, saved)
    return saved or {}


def _units(phases, name: str, kind: str, make) -> list[Unit]:
    saved = read_plan(phases, name, make)
    stranger = _stranger(phases, saved["units"])
    if stranger is not None:  # of the right shape, but a worker would find no such candidate to run
        log.warning(
            "%s is not believed: it names span %r, not a candidate of shard %s; it is made again",
            phases.run.path / name,
            stranger[1],
            stranger[0],
        )
        saved = make()
        atomic_write_json(phases.run.path / name, saved)
    return [Unit.from_json(kind, i, items) for i, items in enumerate(saved["units"])]


def _stranger(phases, units: list) -> tuple[int, str] | None:
    """The first [shard, span_id] of `units` that is no candidate (screen status not_searched) of its shard."""
    named = {}
    for items in units:
        for shard, span, *_ in items:
            named.setdefault(shard, []).append(span)
    screen, shards = phases.stores["screen"], {s.shard for s in phases.plan}
    for shard, spans in named.items():
        if shard not in shards:
            return shard, spans[0]
        path = screen.result_path(shard)
        ids = set(
            pq.read_table(path, columns=["span_id"], filters=[("status", "=", "not_searched")])
            .column("span_id")
            .to_pylist()
        )
        missing = next((span for span in spans if span not in ids), None)
        if missing is not None:
            return shard, missing
    return None


def candidates(phases, status: str = "not_searched") -> list[dict]:
    """Every candidate of the corpus (screen rows with status not_searched; the recall audit also asks
    for the screened_out ones): the ranking columns and what tells copies apart (target ids, certificate)."""
    screen = phases.stores["screen"]
    columns = [*RANK_COLUMNS, *POSITION, "target_ids", "certificate_prompt"]
    return [
        row
        for s in phases.plan
        for row in _keyed(
            pq.read_table(screen.result_path(s.shard), columns=columns, filters=[("status", "=", status)])
        ).to_pylist()
    ]


def _keyed(table: pa.Table) -> pa.Table:
    """target_ids replaced by their key (measures/budget.py target_key): a row's ids as Python ints took
    most of a candidate's memory, and the plans compare targets only."""
    key = dropped.keys(table.column("target_ids").cast(pa.list_(pa.int64())))
    return table.drop_columns(["target_ids"]).append_column("target_key", key)


def certify_units(phases) -> list[Unit]:
    def make() -> dict:
        settling = bm.rank([r for r in candidates(phases) if bm.settles(r)])
        # the same target after the same certificate: one generation decides every copy
        checked, copies = bm.distinct(settling, lambda r: (bm.target_key(r), r["certificate_prompt"]))
        return {
            "units": bm.units([[r["shard"], r["span_id"]] for r in checked], phases.config.unit_size),
            "copies": copies,
        }

    return _units(phases, CERTIFY_PLAN, "certify", make)


def settled(phases) -> set[str]:
    """Spans their certificates settled, the copies of a settled one included."""
    certified = {r["span_id"] for r in phases.stores["certify"].rows() if r["status"] == "memorized"}
    copies = read_plan(phases, CERTIFY_PLAN).get("copies", {})
    return certified | {span for rep in certified for _, span in copies.get(rep, [])}


def search_units(phases) -> list[Unit]:
    def make() -> dict:
        done = settled(phases)
        ranked = bm.rank(candidates(phases))
        known = {}  # a target one copy's certificate settled: the others take its verdict
        for row in ranked:
            if row["span_id"] in done:
                known.setdefault(bm.target_key(row), row["span_id"])
        # the settled spans (certified, and their copies) mark their passages as found
        found = [(r["doc_row"], r["token_start"], r["token_end"]) for r in ranked if r["span_id"] in done]
        open_, waits = bm.fresh_first([r for r in ranked if r["span_id"] not in done], found)
        order, copies = bm.distinct(open_, bm.target_key, known)
        if phases.config.max_candidates is not None:
            order = order[: phases.config.max_candidates]
        drawn = {}
        if phases.draw is not None:
            order, drawn = phases.draw(order)
            chosen = {r["span_id"] for r in order}
            copies = {rep: items for rep, items in copies.items() if rep in chosen}
        return {
            "units": bm.units([[r["shard"], r["span_id"]] for r in order], phases.config.unit_size),
            "copies": copies,
            "waits": sorted(waits & {r["span_id"] for r in order}),
            **({"drawn": drawn} if drawn else {}),
        }

    return _units(phases, SEARCH_PLAN, "search", make)


def tighten_units(phases) -> list[Unit]:
    """Once every search unit is done: the decided prompts (--tighten: and the certified spans'),
    best bound first, each decided one with the prompt its shrinking starts from."""

    def make() -> dict:
        rows = [r for r in phases.stores["search"].rows() if r["acr_kind"] == "decision_bound"]
        if phases.config.tighten:  # a certificate bounds the search from its length (known_length)
            rows += [r for r in phases.stores["certify"].rows() if r["status"] == "memorized"]
        order = sorted(rows, key=lambda r: (-(r["acr"] or 0.0), bm.evidence_key(r)))
        items = [
            [r["shard"], r["span_id"], *([r["prompt"]] if r["acr_kind"] == "decision_bound" else [])]
            for r in order
        ]
        return {"units": bm.units(items, phases.config.unit_size)}

    return _units(phases, TIGHTEN_PLAN, "tighten", make)


def copies(phases) -> dict[str, list]:
    """{span_id searched or certified: [[shard, span_id], ...] of its copies} of both plans."""
    out = {}
    for name in (CERTIFY_PLAN, SEARCH_PLAN):
        for rep, items in read_plan(phases, name).get("copies", {}).items():
            out.setdefault(rep, []).extend(items)
    return out


def pending(phases, units: list[Unit]) -> list[Unit]:
    """Units not done, and units the search budget cut (their cut searches go on from where they are)."""
    if not units:
        return []
    store = phases.stores[units[0].kind]
    done = store.done()
    return [u for u in units if u.index not in done or store.stats(u.index).get("cut")]


def failed(phases, kind: str) -> bool:
    """Whether a done unit of `kind` holds failed rows (a relaunch runs it again)."""
    store = phases.stores[kind]
    return any(store.stats(i).get("failed") for i in store.done_parts())


def unchecked(phases) -> dict[str, str]:
    """Certify units holding failed rows: {unit name: why}."""
    store = phases.stores["certify"]
    return {
        f"certify-{i:05d}": "a certificate check failed (see logs/); relaunch to check it again"
        for i in store.done_parts()
        if store.stats(i).get("failed")
    }


def failing(phases, drawn: set[int]) -> list[tuple[str, int, int]]:
    """(kind, index, failed rows) of every done unit holding failed rows that a relaunch runs again;
    `drawn`: the audit parts of the current draw (an earlier draw's kept parts are not run again)."""
    out = []
    for name in UNIT_KINDS:
        store = phases.stores[name]
        for index in store.done_parts():
            count = store.stats(index).get("failed")
            if count and (name != "audit" or index in drawn):
                out.append((name, index, count))
    return out
