"""The only definition of the Arrow schemas: the results table (one row per span), the passages table,
the corpus `ingest` writes and what a corpus given to scan must hold.

Every field carries its description in the field metadata under b"doc", so the Parquet files document
themselves and `schemas/` (serialized schema + Markdown) is generated from here, never edited by hand.
Results columns also carry their default and roles (fields.py); results.py says what derives from them.
Regenerate with `python -m scanner.schema schemas/`; a test fails when the committed copy drifts.
"""

from scanner.schema.docs import SCHEMAS, schema_doc, write_schemas
from scanner.schema.fields import (
    DOC_KEY,
    ROLE_RANK,
    ROLE_WALL_CLOCK,
    ROLES,
    default_of,
    describe,
    has_default,
    names_with,
    roles_of,
    walk_fields,
)
from scanner.schema.ingested import CORPUS_REQUIRED, INGESTED_VERSION, TEXT_TYPES, ingested_schema
from scanner.schema.passages import PASSAGES_VERSION, passages_schema
from scanner.schema.results import (
    EXPORT_EVIDENCE,
    EXPORT_OPTIONAL,
    RANK_COLUMNS,
    RESULTS_WALL_CLOCK,
    SCHEMA_VERSION,
    STATUSES,
    default_row,
    results_schema,
)

# Every timing column of the tables a run writes (results and passages): what a comparison of two runs'
# tables leaves out, since no two runs take the same seconds.
WALL_CLOCK = tuple(dict.fromkeys(RESULTS_WALL_CLOCK + names_with(passages_schema(), ROLE_WALL_CLOCK)))

__all__ = [
    "CORPUS_REQUIRED",
    "DOC_KEY",
    "EXPORT_EVIDENCE",
    "EXPORT_OPTIONAL",
    "INGESTED_VERSION",
    "PASSAGES_VERSION",
    "RANK_COLUMNS",
    "RESULTS_WALL_CLOCK",
    "ROLES",
    "ROLE_RANK",
    "ROLE_WALL_CLOCK",
    "SCHEMAS",
    "SCHEMA_VERSION",
    "STATUSES",
    "TEXT_TYPES",
    "WALL_CLOCK",
    "default_of",
    "default_row",
    "describe",
    "has_default",
    "ingested_schema",
    "names_with",
    "passages_schema",
    "results_schema",
    "roles_of",
    "schema_doc",
    "walk_fields",
    "write_schemas",
]
