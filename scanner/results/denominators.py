"""What every hit was drawn from: a run's denominators, read off its results table alone.

Courts have ordered the failures produced with the successes and set aside exhibits whose number of
attempts was unknown, so export, report and verify publish these counts beside any hit:
- documents: corpus rows with at least one row here (every document has one, a skipped one included);
- spans: rows; screened: rows the teacher-forced screen ran on;
- candidates: spans the screen passed to phase 2 (memorized, not_memorized, not_searched or failed);
- settled_by_certificate: verdicts their natural-prefix certificate decided without GCG (a later
  tightening may have shortened the prompt); searched: verdicts a search decided; not_searched: the
  candidates the budget never reached; failed: spans whose step raised;
- memorized / not_memorized: the run's verdict at its τ;
- copies: rows that took the verdict of an identical span (searched_as), counted above as well;
- attempts, gcg_steps: the attempts and GCG steps that ran (a copy's are its twin's, counted once);
- prompts: memorized spans by prompt_source (scanner/measures/overlap.py): free of the work's text, or not;
- memorized_in_several_documents: memorized rows whose text other documents hold too (copies_in_corpus
  > 1), counted in memorized: shared text is kept in every count here, and set apart by the report;
- audited / audit_memorized: rows the recall audit drew and searched (audit_stratum; their copies carry
  it too but are not counted here), counted above as
  well (an audited screened-out span is a candidate now), and how many of them are memorized; the
  estimate they give is recall.json, carried beside these counts in the bundle's denominators.json;
- fragile: memorized rows whose verifying generation's margin is below --fragile-margin (a user who only
  exports should hear of them, not only one who runs verify).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from scanner.measures.overlap import FREE, WORK_TEXT

CANDIDATE_STATUSES = ("memorized", "not_memorized", "not_searched", "failed")


def _count(mask) -> int:
    return int(pc.sum(pc.cast(mask, pa.int64())).as_py() or 0) if len(mask) else 0


def _status(table: pa.Table, *statuses: str):
    return pc.is_in(table["status"], pa.array(statuses, pa.string()))


def _certified(table: pa.Table):
    """Rows whose verdict a certificate decided: a 'certify' attempt, or acr_kind certificate_bound (a
    table without attempts, made by hand)."""
    if "acr_kind" in table.column_names:
        bound = pc.equal(table["acr_kind"], "certificate_bound").fill_null(False)
    else:
        bound = pa.chunked_array([pa.array([False] * table.num_rows)])
    if "attempts" not in table.column_names or not table.num_rows:
        return bound
    attempts = table["attempts"].combine_chunks()
    flat, parents = pc.list_flatten(attempts), pc.list_parent_indices(attempts)
    rows = pc.unique(parents.filter(pc.equal(pc.struct_field(flat, "stage"), "certify")))
    return pc.or_(bound, pc.is_in(pa.array(range(table.num_rows), pa.int64()), pc.cast(rows, pa.int64())))


def _documents(table: pa.Table) -> int:
    if not table.num_rows:
        return 0
    key = table["doc_row"] if "doc_row" in table.column_names else table["doc_id"]
    return int(pc.count_distinct(pc.coalesce(key, table["doc_id"])).as_py())


def _own(table: pa.Table) -> pa.Table:
    """Rows that ran their own attempts (not copies)."""
    if "searched_as" not in table.column_names:
        return table
    return table.filter(pc.is_null(table["searched_as"]))


def prompt_counts(table: pa.Table) -> dict[str, int]:
    """Memorized spans by prompt_source; `unmeasured`: memorized ones without it (absent or null)."""
    memorized = table.filter(pc.equal(table["status"], "memorized"))
    if "prompt_source" not in memorized.column_names:
        return {FREE: 0, WORK_TEXT: 0, "unmeasured": memorized.num_rows}
    source = memorized["prompt_source"]
    free, work = (
        _count(pc.equal(source, FREE).fill_null(False)),
        _count(pc.equal(source, WORK_TEXT).fill_null(False)),
    )
    return {FREE: free, WORK_TEXT: work, "unmeasured": memorized.num_rows - free - work}


def denominators(table: pa.Table) -> dict:
    """The run's counts (module docstring), from a results table: plain ints, JSON-ready."""
    decided = _status(table, "memorized", "not_memorized")
    certified = pc.and_(decided, _certified(table)) if table.num_rows else decided
    own = _own(table)
    return {
        "documents": _documents(table),
        "spans": table.num_rows,
        "screened": _count(pc.is_valid(table["greedy_match_rate"])),
        "candidates": _count(_status(table, *CANDIDATE_STATUSES)),
        "settled_by_certificate": _count(certified),
        "searched": _count(decided) - _count(certified),
        "not_searched": _count(_status(table, "not_searched")),
        "failed": _count(_status(table, "failed")),
        "memorized": _count(_status(table, "memorized")),
        "not_memorized": _count(_status(table, "not_memorized")),
        "copies": _count(pc.is_valid(table["searched_as"])) if "searched_as" in table.column_names else 0,
        "attempts": int(pc.sum(pc.list_value_length(own["attempts"])).as_py() or 0)
        if "attempts" in own.column_names and own.num_rows
        else 0,
        "gcg_steps": int(pc.sum(own["steps"]).as_py() or 0) if own.num_rows else 0,
        "memorized_by_prompt": prompt_counts(table),
        # Shared text (a header every book holds) is counted in `memorized`; the report shows it apart,
        # by the passages' shared_text; here how many memorized rows other documents hold too.
        "memorized_in_several_documents": _count(pc.greater(table["copies_in_corpus"], 1).fill_null(False))
        if "copies_in_corpus" in table.column_names
        else 0,
        **_audited(table),
        # Successes whose generation margin is below --fragile-margin: another numeric path may flip them.
        "fragile": _count(
            pc.and_(_status(table, "memorized"), pc.equal(table["fragile"], True).fill_null(False))
        )
        if "fragile" in table.column_names
        else 0,
    }


def _audited(table: pa.Table) -> dict[str, int]:
    if "audit_stratum" not in table.column_names:
        return {"audited": 0, "audit_memorized": 0}
    audited = pc.is_valid(table["audit_stratum"])
    if (
        "searched_as" in table.column_names
    ):  # a copy found by the audited span's text is not a draw of its own
        audited = pc.and_(audited, pc.is_null(table["searched_as"]))
    return {
        "audited": _count(audited),
        "audit_memorized": _count(pc.and_(audited, _status(table, "memorized"))),
    }


def denominators_line(counts: dict) -> str:
    """The counts in one line (export, report, verify print it beside every hit count)."""
    prompts = counts["memorized_by_prompt"]
    unmeasured = f", {prompts['unmeasured']} unmeasured" if prompts["unmeasured"] else ""
    return (
        f"drawn from {counts['documents']} documents, {counts['spans']} spans ({counts['screened']} screened), "
        f"{counts['candidates']} candidates: {counts['settled_by_certificate']} settled by certificate, "
        f"{counts['searched']} searched ({counts['attempts']} attempts, {counts['gcg_steps']} GCG steps), "
        f"{counts['not_searched']} not searched, {counts['failed']} failed; {counts['memorized']} memorized "
        f"({prompts[FREE]} with prompts free of the work's text, {prompts[WORK_TEXT]} with the work's "
        f"text{unmeasured})"
        + (
            f"; {counts['audited']} searched by the recall audit ({counts['audit_memorized']} memorized)"
            if counts.get("audited")
            else ""
        )
        + (
            f"; {counts['fragile']} fragile (generation margin below --fragile-margin: "
            "check them with verify --dtype)"
            if counts.get("fragile")
            else ""
        )
    )
