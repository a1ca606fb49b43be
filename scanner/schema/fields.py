"""How a column is declared: an Arrow field whose metadata carries its description, and, for the
tables acr-scan writes row by row, its default and roles.

Keeping these on the field itself (not in side lists) is what makes the schema the one list: the
default row, the ranking columns and the wall-clock columns are read off the declarations, and a
Parquet file written by acr-scan says the same about itself.
"""

from __future__ import annotations

import json

import pyarrow as pa

DOC_KEY = b"doc"
DEFAULT_KEY = b"default"  # JSON of the value a fresh row holds
ROLES_KEY = b"roles"  # comma-separated ROLES

ROLE_RANK = "rank"  # read by phase 2 to rank the corpus' candidates (scanner/run/units.py)
ROLE_WALL_CLOCK = "wall_clock"  # seconds by a clock: no two runs agree, so comparisons of runs skip them
ROLES = (ROLE_RANK, ROLE_WALL_CLOCK)
_NO_DEFAULT = object()


def field(
    name: str,
    type_: pa.DataType,
    doc: str,
    nullable: bool = False,
    *,
    default=_NO_DEFAULT,
    roles: tuple[str, ...] = (),
) -> pa.Field:
    """A documented field; `default` (JSON-able) and `roles` are recorded only when given."""
    unknown = [r for r in roles if r not in ROLES]
    if unknown:
        raise ValueError(f"field {name!r}: roles {unknown} are not among {ROLES}")
    metadata = {DOC_KEY: doc.encode()}
    if default is not _NO_DEFAULT:
        metadata[DEFAULT_KEY] = json.dumps(default).encode()
    if roles:
        metadata[ROLES_KEY] = ",".join(roles).encode()
    return pa.field(name, type_, nullable=nullable, metadata=metadata)


def describe(field_: pa.Field) -> str:
    return (field_.metadata or {}).get(DOC_KEY, b"").decode()


def has_default(field_: pa.Field) -> bool:
    return DEFAULT_KEY in (field_.metadata or {})


def default_of(field_: pa.Field):
    """The declared default (a fresh object each call, so a row's list is never shared)."""
    if not has_default(field_):
        raise KeyError(f"field {field_.name!r} declares no default")
    return json.loads(field_.metadata[DEFAULT_KEY])


def roles_of(field_: pa.Field) -> tuple[str, ...]:
    raw = (field_.metadata or {}).get(ROLES_KEY, b"").decode()
    return tuple(raw.split(",")) if raw else ()


def names_with(schema: pa.Schema, role: str) -> tuple[str, ...]:
    """The top-level columns of `schema` that declare `role`, in schema order."""
    return tuple(f.name for f in schema if role in roles_of(f))


def _children(field_: pa.Field) -> list[pa.Field]:
    type_ = field_.type
    if pa.types.is_list(type_) or pa.types.is_large_list(type_):
        return [type_.value_field]
    if pa.types.is_struct(type_):
        return [type_.field(i) for i in range(type_.num_fields)]
    return []


def walk_fields(schema: pa.Schema):
    """Every field with its dotted path, nested ones included (list items and struct members)."""
    stack = [(f.name, f) for f in reversed(schema)]
    while stack:
        path, field_ = stack.pop()
        yield path, field_
        stack.extend((f"{path}.{child.name}", child) for child in reversed(_children(field_)))
