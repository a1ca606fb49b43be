"""The results and ingested-corpus schemas: public column names, documentation, the generated copy in schemas/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from scanner.schema import (
    CORPUS_REQUIRED,
    STATUSES,
    TEXT_TYPES,
    describe,
    ingested_schema,
    passages_schema,
    results_schema,
    schema_doc,
    walk_fields,
    write_schemas,
)

ROOT = Path(__file__).resolve().parent.parent
COLUMNS = {
    "doc_id": (pa.string(), False), "span_id": (pa.string(), False), "char_start": (pa.int64(), False),
    "char_end": (pa.int64(), False), "token_start": (pa.int64(), False), "token_end": (pa.int64(), False),
    "text": (pa.string(), False), "target_tokens": (pa.int32(), False), "target_ids": (None, False),
    "status": (pa.string(), False),
    "reason": (pa.string(), True), "acr": (pa.float64(), True), "memorized": (pa.bool_(), False),
    "prompt": (pa.string(), True), "prompt_ids": (None, True), "prompt_tokens": (pa.int32(), True),
    "tau": (pa.float64(), False), "thresholds": (None, False), "greedy_match_rate": (pa.float64(), True),
    "mean_nll": (pa.float64(), True), "discoverable": (pa.bool_(), True),
    "certificate_tokens": (pa.int32(), True), "certificate_prompt": (pa.string(), True),
    "verified_generation": (pa.bool_(), False), "teacher_forced": (pa.bool_(), True),
    "verify_engine": (pa.string(), True), "min_margin": (pa.float64(), True), "steps": (pa.int64(), False),
    "forwards": (pa.int64(), False), "screen_s": (pa.float64(), False), "search_s": (pa.float64(), False),
    "shard": (pa.int32(), False), "extra": (pa.string(), True),
    "verify_version": (pa.string(), True), "verify_dtype": (pa.string(), True),
    "verify_flags": (pa.string(), True), "verify_disagrees": (pa.bool_(), True),
    "rejected_matches": (pa.int64(), True), "screen_engine": (pa.string(), True),
    "doc_row": (pa.string(), True),
    # calibration (scanner/measures/calibration.py)
    "predictable": (pa.bool_(), True), "predictable_reason": (pa.string(), True),
    "calibrated_memorized": (pa.bool_(), True), "random_prompt_trials": (pa.int32(), True),
    "random_prompt_hits": (pa.int32(), True), "random_prompt_match": (pa.float64(), True),
    "unconditional_match": (pa.float64(), True), "calibration_s": (pa.float64(), True),
    "reference_model": (pa.string(), True), "reference_from_prompt": (pa.bool_(), True),
    "reference_from_prefix": (pa.bool_(), True), "reference_match": (pa.float64(), True),
    "reference_nll": (pa.float64(), True), "reference_s": (pa.float64(), True),
    "gzip_ratio": (pa.float64(), True), "zlib_ratio": (pa.float64(), True), "lzma_ratio": (pa.float64(), True),
    "smaz_ratio": (pa.float64(), True),
    "acr_kind": (pa.string(), True), "rejected_early": (pa.bool_(), True),
    # the screen pass: anchored spans and probabilistic extraction
    "anchored": (pa.bool_(), True), "pz_greedy": (pa.float64(), True), "pz_topk": (pa.float64(), True),
    "log10_pz_topk": (pa.float64(), True), "pz_top_k": (pa.int32(), True), "pz_temperature": (pa.float64(), True),
    "np_n": (pa.int64(), True), "np_p": (pa.float64(), True), "np_extraction_probability": (pa.float64(), True),
    "np_discoverable": (pa.bool_(), True),
}


def test_committed_schemas_match_the_code(tmp_path):
    written = write_schemas(tmp_path)
    assert sorted(p.name for p in written) == ["ingested.arrow-schema", "ingested.md", "passages.arrow-schema",
                                               "passages.md", "results.arrow-schema", "results.md"]
    for path in written:
        committed = ROOT / "schemas" / path.name
        assert committed.is_file(), f"{committed} missing; run python -m scanner.schema schemas/"
        assert committed.read_bytes() == path.read_bytes(), \
            f"{committed} is stale; run python -m scanner.schema schemas/ and commit the result"


@pytest.mark.parametrize("name, schema", [("results", results_schema), ("ingested", ingested_schema),
                                          ("passages", passages_schema)])
def test_serialized_schema_round_trips(name, schema):
    data = (ROOT / "schemas" / f"{name}.arrow-schema").read_bytes()
    assert pa.ipc.read_schema(pa.py_buffer(data)).equals(schema(), check_metadata=True)


def test_columns_types_and_nullability_are_the_public_interface():
    schema = results_schema()
    assert schema.names == list(COLUMNS)
    for name, (type_, nullable) in COLUMNS.items():
        field = schema.field(name)
        assert field.nullable == nullable, name
        assert type_ is None or field.type == type_, name
    assert schema.field("prompt_ids").type.value_type == pa.int32()
    entry = schema.field("thresholds").type.value_type
    assert [(f.name, f.type) for f in entry] == [("name", pa.string()), ("tau", pa.float64()),
                                                 ("memorized", pa.bool_())]


@pytest.mark.parametrize("schema, nested", [(results_schema, ("thresholds.item.memorized", "prompt_ids.item")),
                                            (ingested_schema, ("sections.item.path", "sections.item.char_end")),
                                            (passages_schema, ("span_ids.item",))])
def test_every_field_nested_ones_too_has_a_description(schema, nested):
    paths = []
    for path, field in walk_fields(schema()):
        assert describe(field).strip(), f"field {path} has no description"
        paths.append(path)
    assert set(nested) <= set(paths)


def test_the_ingested_corpus_columns_are_a_public_interface():
    schema = ingested_schema()
    assert schema.names == ["doc_id", "title", "author", "language", "source_path", "source_format",
                            "source_bytes", "source_sha256", "source_line", "encoding", "source_char_start",
                            "sections", "meta", "text"]
    # What scan's read stage picks by default: 'doc_id' as the id column, 'text' as a string text column.
    assert schema.field("text").type in TEXT_TYPES and not schema.field("text").nullable
    assert not schema.field("doc_id").nullable and "id" not in schema.names


def test_the_passages_columns_are_a_public_interface():
    schema = passages_schema()
    assert schema.names == [
        "passage_id", "doc_id", "doc_row", "char_start", "char_end", "token_start", "token_end", "tokens", "text",
        "best_acr", "best_acr_kind", "best_prompt", "best_prompt_tokens", "best_span_id", "span_ids", "spans",
        "other_spans_inside", "calibrated_spans", "extend_budget", "extended_token_end", "extended_char_end",
        "extended_tokens", "extended_chars", "extension_text", "extension_prompt", "extension_span_id",
        "extension_engine", "extend_s"]
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
    subprocess.run([sys.executable, "-m", "scanner.schema", str(tmp_path / "out")], check=True,
                   capture_output=True)
    for name in ("results.md", "ingested.md", "passages.md"):
        assert (tmp_path / "out" / name).read_bytes() == (ROOT / "schemas" / name).read_bytes()
