"""The results and ingested-corpus schemas: public column names, documentation, the generated copy in schemas/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from scanner.schema import (
    CORPUS_REQUIRED,
    EXPORT_EVIDENCE,
    EXPORT_OPTIONAL,
    RANK_COLUMNS,
    RESULTS_WALL_CLOCK,
    ROLES,
    SCHEMA_VERSION,
    STATUSES,
    TEXT_TYPES,
    WALL_CLOCK,
    default_row,
    describe,
    has_default,
    ingested_schema,
    passages_schema,
    results_schema,
    roles_of,
    schema_doc,
    walk_fields,
    write_schemas,
)
from scanner.schema.compare import compare_schema

ROOT = Path(__file__).resolve().parent.parent
# The results schema as version 1 published it (a copy of schemas/results.arrow-schema then): a column,
# once published, keeps its name, type and nullability. New columns need no entry anywhere here.
PUBLISHED = [ROOT / "tests" / "published" / "results-v1.arrow-schema"]


def test_committed_schemas_match_the_code(tmp_path):
    written = write_schemas(tmp_path)
    assert sorted(p.name for p in written) == [
        "compare.arrow-schema",
        "compare.md",
        "ingested.arrow-schema",
        "ingested.md",
        "passages.arrow-schema",
        "passages.md",
        "results.arrow-schema",
        "results.md",
    ]
    for path in written:
        committed = ROOT / "schemas" / path.name
        assert committed.is_file(), f"{committed} missing; run python -m scanner.schema schemas/"
        assert committed.read_bytes() == path.read_bytes(), (
            f"{committed} is stale; run python -m scanner.schema schemas/ and commit the result"
        )


@pytest.mark.parametrize(
    "name, schema",
    [
        ("results", results_schema),
        ("ingested", ingested_schema),
        ("passages", passages_schema),
        ("compare", compare_schema),
    ],
)
def test_serialized_schema_round_trips(name, schema):
    data = (ROOT / "schemas" / f"{name}.arrow-schema").read_bytes()
    assert pa.ipc.read_schema(pa.py_buffer(data)).equals(schema(), check_metadata=True)


@pytest.mark.parametrize("path", PUBLISHED, ids=lambda p: p.name)
def test_published_columns_keep_their_name_type_and_nullability(path):
    published = pa.ipc.read_schema(pa.py_buffer(path.read_bytes()))
    schema = results_schema()
    assert schema.names[: len(published)] == published.names, "columns are added at the end, never renamed"
    for old in published:
        new = schema.field(old.name)
        assert (new.type, new.nullable) == (old.type, old.nullable), old.name
    assert schema.field("prompt_ids").type.value_type == pa.int32()
    entry = schema.field("thresholds").type.value_type
    assert [(f.name, f.type) for f in entry] == [
        ("name", pa.string()),
        ("tau", pa.float64()),
        ("memorized", pa.bool_()),
    ]


def test_every_results_column_declares_a_default_and_known_roles():
    used = set()
    for field in results_schema():
        assert has_default(field), f"column {field.name} declares no default"
        assert set(roles_of(field)) <= set(ROLES), field.name
        used.update(roles_of(field))
    assert used == set(ROLES), "a role that no column takes is a list gone stale"


def test_the_default_row_is_a_valid_results_row_and_rows_share_no_list():
    row = default_row()
    assert list(row) == results_schema().names
    table = pa.Table.from_pylist([row], schema=results_schema())  # raises on a None in a non-null column
    assert table.to_pylist() == [row]
    assert row["status"] in STATUSES and row["status"] == "skipped" and row["calibrated_memorized"] is False
    row["thresholds"].append({"name": "tau", "tau": 1.0, "memorized": True})
    assert default_row()["thresholds"] == []


def test_wall_clock_columns_are_every_seconds_column_of_the_tables_a_run_writes():
    timed = [f for schema in (results_schema(), passages_schema()) for f in schema if f.name.endswith("_s")]
    assert sorted(WALL_CLOCK) == sorted(f.name for f in timed)
    assert {"screen_s", "search_s", "calibration_s", "reference_s", "extend_s"} <= set(WALL_CLOCK)
    for field in timed:
        assert field.type == pa.float64() and "seconds" in describe(field), field.name
    assert set(RESULTS_WALL_CLOCK) == set(WALL_CLOCK) & set(results_schema().names)


def test_rank_and_export_columns_are_results_columns():
    names = results_schema().names
    assert set(RANK_COLUMNS) <= set(names) and {"span_id", "shard", "status"} <= set(RANK_COLUMNS)
    exported = EXPORT_EVIDENCE + EXPORT_OPTIONAL
    assert set(exported) <= set(names) and len(set(exported)) == len(exported)
    assert "rejected_early" in EXPORT_OPTIONAL  # how the search ended is evidence too
    # every attempt behind a verdict and whose words its prompt holds travel with the export
    assert {"attempts", "prompt_source", "prompt_doc_run_tokens"} <= set(EXPORT_OPTIONAL)
    assert not any(results_schema().field(c).nullable for c in ("doc_id", "span_id", "text"))


def test_the_version_is_in_the_schema_metadata_and_the_docs():
    assert results_schema().metadata[b"version"] == SCHEMA_VERSION.encode() and int(SCHEMA_VERSION) >= 2
    assert f"(version {SCHEMA_VERSION})" in (ROOT / "schemas" / "results.md").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "schema, nested",
    [
        (
            results_schema,
            ("thresholds.item.memorized", "prompt_ids.item", "attempts.item.steps", "attempts.item.stage"),
        ),
        (ingested_schema, ("sections.item.path", "sections.item.char_end")),
        (passages_schema, ("span_ids.item",)),
    ],
)
def test_every_field_nested_ones_too_has_a_description(schema, nested):
    paths = []
    for path, field in walk_fields(schema()):
        assert describe(field).strip(), f"field {path} has no description"
        paths.append(path)
    assert set(nested) <= set(paths)


def test_the_ingested_corpus_columns_are_a_public_interface():
    schema = ingested_schema()
    assert schema.names == [
        "doc_id",
        "title",
        "author",
        "language",
        "source_path",
        "source_format",
        "source_bytes",
        "source_sha256",
        "source_line",
        "encoding",
        "source_char_start",
        "sections",
        "meta",
        "text",
    ]
    # What scan's read stage picks by default: 'doc_id' as the id column, 'text' as a string text column.
    assert schema.field("text").type in TEXT_TYPES and not schema.field("text").nullable
    assert not schema.field("doc_id").nullable and "id" not in schema.names


def test_the_passages_columns_are_a_public_interface():
    schema = passages_schema()
    assert schema.names == [
        "passage_id",
        "doc_id",
        "doc_row",
        "char_start",
        "char_end",
        "token_start",
        "token_end",
        "tokens",
        "text",
        "best_acr",
        "best_acr_kind",
        "best_prompt",
        "best_prompt_tokens",
        "best_span_id",
        "span_ids",
        "spans",
        "other_spans_inside",
        "calibrated_spans",
        "extend_budget",
        "extended_token_end",
        "extended_char_end",
        "extended_tokens",
        "extended_chars",
        "extension_text",
        "extension_prompt",
        "extension_span_id",
        "extension_engine",
        "extend_s",
        "best_prompt_source",
        "extension_prompt_source",
        "copies_in_corpus",
        "shared_text",
    ]
    # What a passage shares with the results keeps the results' type.
    for name in ("doc_id", "char_start", "char_end", "token_start", "token_end", "text"):
        assert schema.field(name).type == results_schema().field(name).type, name
    assert schema.field("span_ids").type.value_type == pa.string()
    assert not schema.field("passage_id").nullable and schema.field("extended_tokens").nullable


def test_statuses_are_exactly_the_six():
    assert STATUSES == ("memorized", "not_memorized", "screened_out", "skipped", "failed", "not_searched")
    status_doc = describe(results_schema().field("status"))
    assert all(status in status_doc for status in STATUSES)


def test_markdown_table_lists_every_field_with_its_description():
    doc = schema_doc(results_schema())
    rows = [line for line in doc.splitlines() if line.startswith("| `")]
    assert len(rows) == len(list(walk_fields(results_schema())))
    assert rows[0].startswith("| `doc_id` | `string` | no | Document id")
    assert any(row.startswith("| `reason` | `string` | yes |") for row in rows)
    # Pipes inside descriptions (|y| / |x*|) are escaped, so every row keeps exactly four cells.
    assert all(row.replace("\\|", "").count("|") == 5 for row in rows)
    assert set(CORPUS_REQUIRED) == {"text", "id"}


def test_module_entry_point_writes_the_folder(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "scanner.schema", str(tmp_path / "out")], check=True, capture_output=True
    )
    for name in ("results.md", "ingested.md", "passages.md"):
        assert (tmp_path / "out" / name).read_bytes() == (ROOT / "schemas" / name).read_bytes()
