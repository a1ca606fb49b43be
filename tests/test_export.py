"""Export of flagged spans: every format read back and compared value for value, the tau selection rules,
--all, the user errors, and that a failed write never leaves a file behind."""

from __future__ import annotations

import csv
import json
import os

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from scanner.errors import InputError
from scanner.measures import calibration as calibrate
from scanner.results import export as export_module
from scanner.results.export import EVIDENCE_COLUMNS, EXTRA_COLUMNS, export, parse_tau, select_rows
from scanner.schema import default_row, results_schema

TRICKY = 'He said, "hi"\nand left; naïve — 東京 <b>'


def thresholds(tau_flag: bool, **named: tuple[float, bool]) -> list[dict]:
    entries = [{"name": "tau", "tau": 1.0, "memorized": tau_flag}]
    return entries + [{"name": k, "tau": v[0], "memorized": v[1]} for k, v in named.items()]


def make_row(doc_id: str, index: int, status: str = "not_memorized", **values) -> dict:
    """A complete results row; `values` override the defaults."""
    searched = status in ("memorized", "not_memorized")
    row = {
        **default_row(),  # the schema's defaults: a column added there needs no change here
        "doc_id": doc_id,
        "span_id": f"{doc_id}-{index:04d}",
        "char_start": 100 * index,
        "char_end": 100 * index + 90,
        "token_start": 32 * index,
        "token_end": 32 * index + 32,
        "text": f"text of {doc_id} span {index}",
        "target_tokens": 32,
        "target_ids": list(range(index, index + 32)),
        "status": status,
        "reason": None,
        "acr": 0.5 if searched else None,
        "memorized": status == "memorized",
        "prompt": None,
        "prompt_ids": None,
        "prompt_tokens": None,
        "tau": 1.0,
        "thresholds": thresholds(status == "memorized") if searched else [],
        "greedy_match_rate": 0.25,
        "mean_nll": 2.5,
        "discoverable": None,
        "certificate_tokens": None,
        "certificate_prompt": None,
        "verified_generation": False,
        "teacher_forced": None,
        "verify_engine": None,
        "min_margin": None,
        "steps": 100 if searched else 0,
        "forwards": 500,
        "screen_s": 0.01,
        "search_s": 1.5 if searched else 0.0,
        "shard": 0,
    }
    row.update(values)
    return row


def found(prompt: str, acr: float, verified: bool = True) -> dict:
    """The columns of a row whose search found `prompt`."""
    return {
        "prompt": prompt,
        "prompt_ids": list(range(len(prompt.split()))),
        "prompt_tokens": len(prompt.split()),
        "acr": acr,
        "verified_generation": verified,
        "teacher_forced": True,
        "verify_engine": "hf" if verified else None,
        "min_margin": 0.125,
    }


ROWS = [
    make_row(
        "a",
        0,
        "memorized",
        text=TRICKY,
        certificate_tokens=7,
        **found("p q r s t u v w", 4.0),
        thresholds=thresholds(True, gzip=(2.5, True), zlib=(2.4, True), lzma=(3.0, True)),
    ),
    make_row("a", 1, "not_memorized", acr=0.8, thresholds=thresholds(False, gzip=(2.5, False))),
    # An empty prompt (the template alone elicits the span) must stay "" and not turn into null.
    make_row(
        "a",
        2,
        "memorized",
        **{**found("", 32.0), "prompt_tokens": 0},
        thresholds=thresholds(True, gzip=(40.0, False), lzma=(50.0, False)),
    ),
    make_row("a", 3, "screened_out"),
    # Beats gzip but not the run's own τ of 4.
    make_row(
        "b",
        0,
        "not_memorized",
        tau=4.0,
        **found("x y z w v u t s r q p", 3.0),
        thresholds=[
            {"name": "tau", "tau": 4.0, "memorized": False},
            {"name": "gzip", "tau": 1.2, "memorized": True},
        ],
    ),
    make_row("b", 1, "skipped", reason="too short: 5 tokens < 32", text="", target_tokens=0, target_ids=[]),
    make_row("b", 2, "failed", reason="RuntimeError: CUDA out of memory"),
    # High ACR but only teacher-forced, never verified by generation: no number selects it.
    make_row("b", 3, "not_memorized", **found("only forced", 5.0, verified=False)),
]


@pytest.fixture
def table() -> pa.Table:
    return pa.Table.from_pylist(ROWS, schema=results_schema())


def span_ids(table: pa.Table) -> list[str]:
    return table["span_id"].to_pylist()


@pytest.mark.parametrize(
    ("tau", "expected"),
    [
        ("1", ["a-0000", "a-0002"]),
        ("gzip", ["a-0000", "b-0000"]),
        ("zlib", ["a-0000"]),
        ("lzma", ["a-0000"]),
        ("smaz", []),
        ("2", ["a-0000", "a-0002", "b-0000"]),
        ("3", ["a-0000", "a-0002"]),
        ("4.0", ["a-0002"]),
        ("1e6", []),
    ],
)
def test_tau_selection(table, tau, expected):
    assert span_ids(select_rows(table, tau)) == expected


def test_selection_has_evidence_columns_and_the_threshold_beaten(table):
    picked = select_rows(table, "gzip")
    assert picked.column_names == [*EVIDENCE_COLUMNS, *EXTRA_COLUMNS, "threshold_name", "threshold"]
    # What version 1 wrote, in its order, then how the search ended (rejected_early, since version 2);
    # columns exported later come after them.
    v1 = ("token_end", "target_ids", "prompt_ids", "teacher_forced", "mean_nll", *calibrate.COLUMNS)
    assert EXTRA_COLUMNS[: len(v1)] == v1 and EXTRA_COLUMNS[len(v1)] == "rejected_early"
    assert picked["rejected_early"].to_pylist() == [None, None]  # the crafted rows leave it at its default
    assert picked["threshold_name"].to_pylist() == ["gzip", "gzip"]
    assert picked["threshold"].to_pylist() == [2.5, 1.2]
    assert select_rows(table, "1")["threshold"].to_pylist() == [1.0, 1.0]
    assert select_rows(table, "2.5")["threshold_name"].to_pylist() == ["2.5"] * 3


def test_all_rows_keeps_every_row_and_column(table):
    assert select_rows(table, "gzip", all_rows=True).equals(table)


@pytest.mark.parametrize("tau", ["abc", "gzipp", "0", "-1", "nan", "inf", ""])
def test_bad_tau_names_value_and_choices(table, tau, tmp_path):
    with pytest.raises(InputError) as err:
        export(table, tmp_path / "out.csv", tau=tau)
    assert repr(tau) in str(err.value) and "gzip" in str(err.value) and "number" in str(err.value)
    with pytest.raises(InputError):
        select_rows(table, tau, all_rows=True)
    assert list(tmp_path.iterdir()) == []


def test_parse_tau():
    assert parse_tau("1") == "1" and parse_tau(" smaz ") == "smaz"
    assert parse_tau("1.0") == 1.0 and parse_tau("2.5") == 2.5


@pytest.mark.parametrize("name", ["out.txt", "out.json", "out", "out.csv.gz"])
def test_bad_extension_names_value_and_choices(table, tmp_path, name):
    with pytest.raises(InputError) as err:
        export(table, tmp_path / name)
    assert name in str(err.value) and ".csv" in str(err.value) and ".jsonl" in str(err.value)
    assert list(tmp_path.iterdir()) == []


def test_missing_column_is_a_user_error(table, tmp_path):
    with pytest.raises(InputError, match="verify_engine"):
        export(table.drop_columns(["verify_engine"]), tmp_path / "out.csv")


@pytest.mark.parametrize("all_rows", [False, True])
def test_parquet_round_trip(table, tmp_path, all_rows):
    out = tmp_path / "flagged.parquet"
    expected = select_rows(table, "gzip", all_rows)
    assert export(table, out, tau="gzip", all_rows=all_rows) == expected.num_rows
    assert pq.read_table(out).equals(expected)


@pytest.mark.parametrize("all_rows", [False, True])
def test_jsonl_round_trip(table, tmp_path, all_rows):
    out = tmp_path / "flagged.jsonl"
    expected = select_rows(table, "1", all_rows).to_pylist()
    assert export(table, out, all_rows=all_rows) == len(expected)
    lines = out.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == expected
    assert TRICKY in [row["text"] for row in expected]


def csv_value(cell: str, type_: pa.DataType):
    """Decode one cell written by export as the csv module sees it."""
    if cell == "":
        return None
    if pa.types.is_nested(type_):
        return json.loads(cell)
    if pa.types.is_boolean(type_):
        return {"true": True, "false": False}[cell]
    if pa.types.is_integer(type_):
        return int(cell)
    if pa.types.is_floating(type_):
        return float(cell)
    return cell


@pytest.mark.parametrize("all_rows", [False, True])
def test_csv_round_trip_with_the_csv_module(table, tmp_path, all_rows):
    out = tmp_path / "flagged.csv"
    expected = select_rows(table, "2", all_rows)
    assert export(table, out, tau="2", all_rows=all_rows) == expected.num_rows
    with open(out, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == expected.column_names
    types = {field.name: field.type for field in expected.schema}
    decoded = [{k: csv_value(v, types[k]) for k, v in row.items()} for row in rows]
    # The csv module cannot tell an empty string from a missing value; pyarrow below can.
    wanted = [{k: (None if v == "" else v) for k, v in row.items()} for row in expected.to_pylist()]
    assert decoded == wanted


def test_csv_round_trip_with_pyarrow_keeps_empty_strings_apart_from_nulls(table, tmp_path):
    out = tmp_path / "flagged.csv"
    export(table, out, tau="2")
    expected = select_rows(table, "2")
    flat = {f.name: f.type for f in expected.schema if not pa.types.is_nested(f.type)}
    options = pacsv.ConvertOptions(
        column_types=flat, strings_can_be_null=True, quoted_strings_can_be_null=False
    )
    back = pacsv.read_csv(out, convert_options=options)
    for name in flat:
        assert back[name].to_pylist() == expected[name].to_pylist(), name
    assert back["prompt"].to_pylist()[1] == ""
    assert [json.loads(v) for v in back["prompt_ids"].to_pylist()] == expected["prompt_ids"].to_pylist()


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_empty_selection_writes_an_empty_file_of_the_format(table, tmp_path, suffix):
    out = tmp_path / f"none{suffix}"
    assert export(table, out, tau="smaz") == 0
    assert out.exists()
    if suffix == ".parquet":
        assert pq.read_table(out).num_rows == 0
    elif suffix == ".csv":
        assert out.read_text().splitlines()[0].startswith('"doc_id","span_id"')


def test_uppercase_extension_and_missing_parent_folder(table, tmp_path):
    out = tmp_path / "new" / "folder" / "FLAGGED.JSONL"
    assert export(table, out) == 2
    assert len(out.read_text().splitlines()) == 2


def leftovers(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_failure_mid_write_keeps_the_old_file_and_no_temp(table, tmp_path, monkeypatch):
    out = tmp_path / "flagged.jsonl"
    out.write_text("old\n")
    calls = []

    def failing(value):
        calls.append(value)
        if len(calls) > 1:
            raise RuntimeError("disk full")
        return json.dumps(value)

    monkeypatch.setattr(export_module, "_dumps", failing)
    monkeypatch.setattr(export_module, "BATCH_ROWS", 1)  # the first row reaches the file before the failure
    with pytest.raises(RuntimeError, match="disk full"):
        export(table, out, all_rows=True)
    assert out.read_text() == "old\n"
    assert leftovers(tmp_path) == ["flagged.jsonl"]


def test_failed_rename_leaves_no_temp(table, tmp_path):
    (tmp_path / "flagged.parquet").mkdir()  # os.replace cannot put a file over a folder
    with pytest.raises(OSError):
        export(table, tmp_path / "flagged.parquet")
    assert leftovers(tmp_path) == ["flagged.parquet"]
    assert list((tmp_path / "flagged.parquet").iterdir()) == []


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root can write anywhere")
def test_unwritable_folder_leaves_nothing(table, tmp_path):
    folder = tmp_path / "locked"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        with pytest.raises(PermissionError):
            export(table, folder / "flagged.csv")
        assert leftovers(folder) == []
    finally:
        folder.chmod(0o700)


def test_a_table_without_optional_columns_exports_the_rest(table, tmp_path):
    trimmed = table.drop_columns(["target_ids", "teacher_forced"])  # made by hand or trimmed
    assert export(trimmed, tmp_path / "flagged.jsonl") == 2
    first = json.loads((tmp_path / "flagged.jsonl").read_text().splitlines()[0])
    assert "target_ids" not in first and first["prompt_ids"] == list(range(8))


def with_sources(table: pa.Table, sources: dict[str, str]) -> pa.Table:
    rows = [{**r, "prompt_source": sources.get(r["span_id"])} for r in table.to_pylist()]
    return pa.Table.from_pylist(rows, schema=results_schema())


def test_free_prompts_only_keeps_the_elicitations_whose_prompt_holds_none_of_the_works_text(table, tmp_path):
    sourced = with_sources(table, {"a-0000": "work_text", "a-0002": "free", "b-0000": "free"})
    assert span_ids(select_rows(sourced, "1", free_only=True)) == ["a-0002"]
    assert span_ids(select_rows(sourced, "gzip", free_only=True)) == ["b-0000"]
    assert export(sourced, tmp_path / "free.jsonl", free_only=True) == 1
    lines = (tmp_path / "free.jsonl").read_text().splitlines()
    assert [json.loads(line)["prompt_source"] for line in lines] == ["free"]
    with pytest.raises(InputError, match="--all"):
        select_rows(sourced, all_rows=True, free_only=True)
    with pytest.raises(InputError, match="prompt_source"):
        select_rows(sourced.drop_columns(["prompt_source"]), free_only=True)


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_every_export_travels_with_the_runs_denominators(table, tmp_path, suffix):
    from scanner.results.denominators import denominators

    sourced = with_sources(table, {"a-0000": "work_text", "a-0002": "free"})
    out = tmp_path / f"flagged{suffix}"
    assert export(sourced, out, about={"work_text_tokens": 4}) == 2
    sidecar = json.loads(export_module.denominators_path(out).read_text())
    assert sidecar["run"] == denominators(sourced) and sidecar["rows"] == 2
    assert sidecar["selection"] == {
        "tau": "1",
        "all": False,
        "calibrated": False,
        "free_prompts_only": False,
        "work_text_tokens": 4,
    }
    assert sidecar["rows_by_prompt_source"] == {"work_text": 1, "free": 1}
    run = sidecar["run"]  # the crafted table: 8 spans of 2 documents
    assert (run["documents"], run["spans"], run["candidates"], run["memorized"], run["not_searched"]) == (
        2,
        8,
        6,
        2,
        0,
    )
    assert run["memorized_by_prompt"] == {"free": 1, "work_text": 1, "unmeasured": 0}
    if suffix == ".parquet":
        meta = pq.read_schema(out).metadata[export_module.DENOMINATORS_KEY]
        assert json.loads(meta) == sidecar


def test_passages_free_prompts_only_needs_a_free_best_and_extension_prompt(tmp_path):
    from scanner.measures.passages import no_extension
    from scanner.schema import passages_schema

    base = {name: None for name in passages_schema().names}
    rows = [
        {
            **base,
            **no_extension(),
            "passage_id": p,
            "doc_id": "d",
            "char_start": 0,
            "char_end": 1,
            "token_start": 0,
            "token_end": 1,
            "tokens": 1,
            "text": "t",
            "best_span_id": "s",
            "span_ids": ["s"],
            "spans": 1,
            "other_spans_inside": 0,
            "best_prompt_source": best,
            "extension_prompt_source": ext,
        }
        for p, best, ext in (
            ("p1", "free", None),
            ("p2", "free", "work_text"),
            ("p3", "work_text", None),
            ("p4", "free", "free"),
        )
    ]
    passages = pa.Table.from_pylist(rows, schema=passages_schema())
    picked = export_module.select_passages(passages, free_only=True)
    assert picked["passage_id"].to_pylist() == ["p1", "p4"]
    assert export_module.export_passages(passages, tmp_path / "p.jsonl", free_only=True) == 2
    assert json.loads(export_module.denominators_path(tmp_path / "p.jsonl").read_text())["rows"] == 2
