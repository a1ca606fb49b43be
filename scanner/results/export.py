"""Flagged spans, with the prompts that reproduce them, as CSV, JSONL or Parquet: evidence others can re-check.

`tau` picks which spans count as memorized:
- "1": the run's own verdict (status == memorized, decided at the run's main τ);
- a compressor name (gzip, zlib, lzma, smaz): the span's `thresholds` entry of that name says memorized,
  i.e. ACR beats what that compressor achieves on the same text;
- a number: ACR > number with a prompt verified by greedy generation.
Without `all_rows` only those spans are written, with the columns a reader needs to re-check them and the
threshold each one beat; with it every row and every column is written (the selection is ignored).
`calibrated` keeps, of the selected spans, only calibrated memorization (`calibrated_memorized`: memorized
at the run's τ and not shown predictable, scanner/measures/calibration.py); `free_only` keeps only
elicitations whose prompt holds none of the work's text (prompt_source 'free', scanner/measures/overlap.py).

Every export travels with the run's denominators (scanner/results/denominators.py): a sidecar
`<out>.denominators.json` beside any format, and in a Parquet file's schema metadata too, so nothing is
published as a hit without the counts it was drawn from.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from scanner.errors import require
from scanner.measures.compression import METHODS
from scanner.measures.overlap import FREE, SOURCES
from scanner.results.denominators import denominators
from scanner.schema import EXPORT_EVIDENCE, EXPORT_OPTIONAL, results_schema
from scanner.storage.atomic import atomic_write, atomic_write_json

log = logging.getLogger(__name__)

RUN_FLAG = "1"
NAMED_TAUS = (RUN_FLAG, *METHODS)
FORMATS = (".csv", ".jsonl", ".parquet")
# The schema says what a flagged span's export holds and in which order (scanner/schema/results.py).
EVIDENCE_COLUMNS, EXTRA_COLUMNS = EXPORT_EVIDENCE, EXPORT_OPTIONAL
# Needed to select, beyond the evidence itself.
SELECT_COLUMNS = ("status", "tau", "thresholds")
FORMULA_START = r"^[=+\-@\t\r]"
BATCH_ROWS = 4096  # rows turned into Python objects at a time for CSV / JSONL, to bound memory
DENOMINATORS_SUFFIX = ".denominators.json"
DENOMINATORS_KEY = b"acr_denominators"  # the same JSON in a Parquet export's schema metadata


def parse_tau(tau: str) -> str | float:
    """ "1" or a compressor name as given; anything else must be a number > 0 and is returned as a float."""
    text = str(tau).strip()
    if text in NAMED_TAUS:
        return text
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    require(
        math.isfinite(value) and value > 0,
        f"tau {tau!r} is not one of {', '.join(NAMED_TAUS)} or a number > 0; pass --tau 1 (the run's "
        "verdict), a compressor name, or a number such as 2.5",
    )
    return value


def check_columns(table: pa.Table, needed: tuple[str, ...]) -> None:
    """InputError naming the missing columns: the table is not a results table (or a trimmed one)."""
    missing = [name for name in needed if name not in table.column_names]
    require(
        not missing,
        f"results table lacks column(s) {missing}; columns are {table.column_names}; "
        "pass a results table written by acr-scan (scanner.schema.results_schema())",
    )


def _by_run_flag(table: pa.Table) -> tuple[pa.Table, pa.Array]:
    picked = table.filter(pc.equal(table["status"], "memorized"))
    return picked, picked["tau"].combine_chunks().cast(pa.float64())


def _by_number(table: pa.Table, tau: float) -> tuple[pa.Table, pa.Array]:
    # Same rule as acr.is_memorized: ACR strictly above τ and a prompt that greedy generation verified.
    mask = pc.and_kleene(pc.greater(table["acr"], tau), table["verified_generation"])
    mask = pc.and_kleene(mask, pc.is_valid(table["prompt"])).fill_null(False)
    picked = table.filter(mask)
    return picked, pa.array([tau] * picked.num_rows, pa.float64())


def _by_named(table: pa.Table, name: str) -> tuple[pa.Table, pa.Array]:
    # Flatten the list<struct> column once instead of walking every row in Python.
    column = table["thresholds"].combine_chunks()
    flat, parents = pc.list_flatten(column), pc.list_parent_indices(column)
    named = pc.equal(pc.struct_field(flat, "name"), name)
    if table.num_rows and not pc.any(named).as_py():
        log.warning("no row has a %r threshold; did the run configure it? nothing selected", name)
    hit = pc.and_kleene(named, pc.struct_field(flat, "memorized")).fill_null(False)
    rows_hit, taus_hit = parents.filter(hit).to_pylist(), pc.struct_field(flat, "tau").filter(hit).to_pylist()
    first: dict[int, float] = {}
    for row, tau in zip(rows_hit, taus_hit, strict=True):
        first.setdefault(row, tau)  # a repeated name in one row: the first entry decides
    rows = sorted(first)
    return table.take(pa.array(rows, pa.int64())), pa.array([first[r] for r in rows], pa.float64())


def _evidence_columns(table: pa.Table) -> list[str]:
    return list(EVIDENCE_COLUMNS) + [name for name in EXTRA_COLUMNS if name in table.column_names]


def _calibrated_only(picked: pa.Table, threshold: pa.Array) -> tuple[pa.Table, pa.Array]:
    require(
        "calibrated_memorized" in picked.column_names,
        "--calibrated: the table has no calibrated verdicts (no calibrated_memorized column: a table "
        "not written by acr-scan); pass a run's results table, or drop --calibrated",
    )
    keep = picked["calibrated_memorized"].combine_chunks().fill_null(False)
    return picked.filter(keep), threshold.filter(keep)


def _free_only(picked: pa.Table, threshold: pa.Array) -> tuple[pa.Table, pa.Array]:
    require(
        "prompt_source" in picked.column_names,
        "--free-prompts-only: the table has no prompt_source column (a table not written by acr-scan); "
        "pass a run's results table, or drop --free-prompts-only",
    )
    keep = pc.equal(picked["prompt_source"], FREE).combine_chunks().fill_null(False)
    return picked.filter(keep), threshold.filter(keep)


def select_rows(
    table: pa.Table,
    tau: str = RUN_FLAG,
    all_rows: bool = False,
    calibrated: bool = False,
    free_only: bool = False,
) -> pa.Table:
    """The rows to export. Without `all_rows`: the spans memorized at `tau` (see the module docstring), with
    EVIDENCE_COLUMNS, the EXTRA_COLUMNS present, `threshold_name` and `threshold` (the τ each span beat);
    `calibrated`: only those calibrated memorized; `free_only`: only those whose prompt is free of the
    work's text. With `all_rows`: the whole table, unchanged. `tau` is validated either way."""
    kind = parse_tau(tau)
    require(
        not (all_rows and free_only), "--free-prompts-only selects elicitations and --all every row; drop one"
    )
    if all_rows:
        return table
    check_columns(table, EVIDENCE_COLUMNS + SELECT_COLUMNS)
    if kind == RUN_FLAG:
        picked, threshold, name = *_by_run_flag(table), "tau"
    elif isinstance(kind, float):
        picked, threshold, name = *_by_number(table, kind), f"{kind:g}"
    else:
        picked, threshold, name = *_by_named(table, kind), kind
    if calibrated:
        picked, threshold = _calibrated_only(picked, threshold)
    if free_only:
        picked, threshold = _free_only(picked, threshold)
    evidence = picked.select(_evidence_columns(table))
    evidence = evidence.append_column("threshold_name", pa.array([name] * picked.num_rows, pa.string()))
    evidence = evidence.append_column("threshold", threshold)
    log.info("selected %d of %d rows at tau %s", evidence.num_rows, table.num_rows, tau)
    return evidence


def _format(out: Path) -> str:
    suffix = out.suffix.lower()
    require(
        suffix in FORMATS,
        f"output {str(out)!r} has extension {suffix or '(none)'!r}; expected one of "
        f"{', '.join(FORMATS)}; name the file e.g. flagged.csv, flagged.jsonl or flagged.parquet",
    )
    return suffix


def _json_safe(value):
    # JSON has no NaN or Infinity and strict readers (jq, browsers) reject them: write null instead.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


def _dumps(value) -> str:
    return json.dumps(_json_safe(value), ensure_ascii=False)


def _csv_schema(table: pa.Table) -> pa.Schema:
    # CSV cells are flat: list and struct columns travel as JSON strings; floats as text (see _floats).
    return pa.schema(
        [
            pa.field(
                f.name, pa.string() if pa.types.is_nested(f.type) or pa.types.is_floating(f.type) else f.type
            )
            for f in table.schema
        ]
    )


def _csv_column(column: pa.Array) -> pa.Array:
    if pa.types.is_floating(column.type):
        return _floats(column)
    if pa.types.is_nested(column.type):
        column = pa.array([None if v is None else _dumps(v) for v in column.to_pylist()], pa.string())
    return _defused(column) if pa.types.is_string(column.type) else column


def _floats(column: pa.Array) -> pa.Array:
    """Numbers stay numbers (a negative one is not a formula), but "-inf" (log10_pz_topk of a span outside
    the top k) is read as one: non-finite values get the apostrophe too."""
    text = pc.cast(column, pa.string())
    infinite = pc.is_inf(column).fill_null(False)
    return pc.if_else(infinite, pc.binary_join_element_wise("'", text, ""), text)


def _defused(column: pa.Array) -> pa.Array:
    """Spreadsheet-safe cells (OWASP's advice on CSV injection): a text cell starting with = + - @ tab
    or carriage return is read as a formula by Excel, LibreOffice and Sheets, so it gets a leading
    apostrophe, which they show as text. JSONL and Parquet exports keep every value exact."""
    risky = pc.match_substring_regex(column, FORMULA_START).fill_null(False)
    return pc.if_else(risky, pc.binary_join_element_wise("'", column, ""), column)


def _write_csv(table: pa.Table, f: BinaryIO) -> None:
    schema = _csv_schema(table)
    with pacsv.CSVWriter(f, schema) as writer:
        for batch in table.to_batches(max_chunksize=BATCH_ROWS):
            columns = [_csv_column(column) for column in batch.columns]
            writer.write_batch(pa.RecordBatch.from_arrays(columns, schema=schema))


def _write_jsonl(table: pa.Table, f: BinaryIO) -> None:
    for batch in table.to_batches(max_chunksize=BATCH_ROWS):
        lines = "".join(_dumps(row) + "\n" for row in batch.to_pylist())
        f.write(lines.encode("utf-8"))


def _write_parquet(table: pa.Table, f: BinaryIO) -> None:
    pq.write_table(table, f)


WRITERS = {".csv": _write_csv, ".jsonl": _write_jsonl, ".parquet": _write_parquet}


def denominators_path(out: str | Path) -> Path:
    out = Path(out)
    return out.with_name(out.name + DENOMINATORS_SUFFIX)


def _by_source(rows: pa.Table, column: str) -> dict[str, int] | None:
    if column not in rows.column_names:
        return None
    counts = {name: 0 for name in SOURCES}
    for item in pc.value_counts(rows[column]).to_pylist():
        if item["values"] is not None:
            counts[item["values"]] = item["counts"]
    return counts


def _with_denominators(writer, counts: dict):
    """A writer that puts `counts` in a Parquet file's schema metadata; the other formats are flat."""
    if writer is not _write_parquet:
        return writer
    blob = json.dumps(counts, sort_keys=True).encode()
    return lambda rows, f: writer(
        rows.replace_schema_metadata({**(rows.schema.metadata or {}), DENOMINATORS_KEY: blob}), f
    )


def _write(
    out: Path,
    rows: pa.Table,
    results: pa.Table,
    selection: dict,
    source_column: str,
    shared: dict | None = None,
) -> None:
    """`rows` to `out` by its extension, and the run's denominators beside it (and inside a Parquet file);
    `shared`: how shared text was treated (report_shared.treatment)."""
    counts = {
        "run": denominators(results),
        "selection": selection,
        "rows": rows.num_rows,
        "rows_by_prompt_source": _by_source(rows, source_column),
        **({"shared_text": shared} if shared else {}),
    }
    writer = _with_denominators(WRITERS[_format(out)], counts)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out, lambda f: writer(rows, f))
    atomic_write_json(denominators_path(out), counts)


def export(
    table: pa.Table,
    out: str | Path,
    tau: str = RUN_FLAG,
    all_rows: bool = False,
    calibrated: bool = False,
    free_only: bool = False,
    about: dict | None = None,
    leave_out: list[str] | None = None,
    shared: dict | None = None,
) -> int:
    """Write the selected rows (see select_rows) to `out`, formatted by its extension, with the run's
    denominators beside it; `about`: more of the selection to record (e.g. the run's work_text_tokens);
    `leave_out`: span_ids not written (shared text, --without-shared-text), counted in the selection;
    `shared`: how shared text was treated, recorded beside the counts. Returns rows written."""
    out = Path(out)
    _format(out)
    rows = select_rows(table, tau, all_rows, calibrated, free_only)
    selection = {
        "tau": tau,
        "all": all_rows,
        "calibrated": calibrated,
        "free_prompts_only": free_only,
        **(about or {}),
    }
    if leave_out is not None:
        kept = pc.invert(pc.is_in(rows["span_id"], value_set=pa.array(leave_out, pa.string())))
        selection["shared_text_rows_left_out"] = rows.num_rows - _count_true(kept)
        rows = rows.filter(kept)
    _write(out, rows, table, selection, "prompt_source", shared)
    log.info("wrote %d rows to %s", rows.num_rows, out)
    return rows.num_rows


def _count_true(mask) -> int:
    return int(pc.sum(pc.cast(mask, pa.int64())).as_py() or 0) if len(mask) else 0


def without_shared(table: pa.Table) -> pa.Table:
    """The passages less those marked shared text (all kept where the table lacks the column)."""
    if "shared_text" not in table.column_names:
        return table
    return table.filter(pc.invert(pc.fill_null(table["shared_text"], False)))


def select_passages(table: pa.Table, calibrated: bool = False, free_only: bool = False) -> pa.Table:
    """The passages table as it is (every row and column); `calibrated`: only passages holding at least
    one calibrated memorized span (calibrated_spans > 0); `free_only`: only passages whose best prompt
    and extension prompt (where one ran) are free of the work's text."""
    if calibrated:
        require(
            table.num_rows == 0 or table["calibrated_spans"].null_count < table.num_rows,
            "--calibrated: the passages hold no calibrated verdicts (calibrated_spans null: built from "
            "results without calibrated_memorized); drop --calibrated",
        )
        table = table.filter(pc.greater(table["calibrated_spans"], 0).fill_null(False))
    if free_only:
        require(
            "best_prompt_source" in table.column_names,
            "--free-prompts-only: the passages table has no best_prompt_source column (made by hand, or "
            "by another passages version: relaunch the scan command to build it again), or drop "
            "--free-prompts-only",
        )
        best = pc.equal(table["best_prompt_source"], FREE).fill_null(False)
        extension = table["extension_prompt_source"]
        table = table.filter(
            pc.and_(best, pc.or_kleene(pc.is_null(extension), pc.equal(extension, FREE)).fill_null(False))
        )
    return table


def export_passages(
    table: pa.Table,
    out: str | Path,
    calibrated: bool = False,
    free_only: bool = False,
    results: pa.Table | None = None,
    about: dict | None = None,
    shared: dict | None = None,
) -> int:
    """Write the memorized passages (RUN/passages.parquet, schemas/passages.md) to `out`, formatted by
    its extension (CSV cells defused as for spans), with the denominators of `results` (the run's
    results table) beside it; returns rows written."""
    out = Path(out)
    _format(out)
    rows = select_passages(table, calibrated, free_only)
    selection = {"passages": True, "calibrated": calibrated, "free_prompts_only": free_only, **(about or {})}
    _write(
        out,
        rows,
        results if results is not None else _empty_results(),
        selection,
        "best_prompt_source",
        shared,
    )
    log.info("wrote %d passages to %s", rows.num_rows, out)
    return rows.num_rows


def _empty_results() -> pa.Table:
    return results_schema().empty_table()
