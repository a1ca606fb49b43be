"""The screen's rows of one status, ranked and one per target, held as Arrow columns rather than Python
rows: what the recall audit samples from the spans the screen dropped (run/audit.py population).

At library scale nearly every span is screened out (3.7M at 1,000 books); as Python dicts with their
target ids they took about 5 KB each in the driver. Here each shard is read with the columns the rank
needs, its target ids turned into their key (measures/budget.py target_key, the same digest) and
dropped, and only span_id, shard, the rank's three numbers and the key stay: about 100 bytes a span.
The order is measures/budget.py evidence_key's, computed by Arrow's sort (same doubles, same ties).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from scanner.measures.budget import ids_digest, ids_key

READ = [
    "span_id",
    "shard",
    "target_tokens",
    "certificate_tokens",
    "greedy_match_rate",
    "mean_nll",
    "target_ids",
]
ORDER = [("bound", "descending"), ("match", "descending"), ("nll", "ascending"), ("span_id", "ascending")]


def keys(column: pa.ChunkedArray, printed: bool = True) -> pa.Array:
    """Each row's target key (measures/budget.py target_key) from its list of token ids; `printed`
    False: the key's 16 bytes (ids_digest), a third of the memory of its hex."""
    digest, kind = (ids_key, pa.string()) if printed else (ids_digest, pa.binary(16))
    out: list = []
    for chunk in column.chunks:
        offsets = chunk.offsets.to_numpy()  # into `values`, which ignores a slice's offset: absolute
        data = memoryview(np.asarray(chunk.values.to_numpy(zero_copy_only=False), dtype="<i8").tobytes())
        out += [digest(data[a * 8 : b * 8]) for a, b in zip(offsets[:-1], offsets[1:], strict=True)]
    return pa.array(out, kind)


def _shard(path, status: str, exclude: pa.Array) -> pa.Table:
    """One screen part's rows of `status`, not in `exclude`, with the rank's columns and the target key."""
    table = pq.read_table(path, columns=READ, filters=[("status", "=", status)])
    table = table.filter(pc.invert(pc.is_in(table.column("span_id"), value_set=exclude)))
    certificate = pc.fill_null(table.column("certificate_tokens"), 0)
    bound = pc.if_else(
        pc.greater(certificate, 0),
        pc.divide(pc.cast(table.column("target_tokens"), pa.float64()), pc.cast(certificate, pa.float64())),
        0.0,
    )
    return pa.table(
        {
            "span_id": table.column("span_id"),
            "shard": table.column("shard"),
            "bound": bound,
            "match": pc.fill_null(table.column("greedy_match_rate"), 0.0),
            "nll": pc.fill_null(table.column("mean_nll"), float("inf")),
            "key": keys(table.column("target_ids").cast(pa.list_(pa.int64())), printed=False),
        }
    )


def ranked_distinct(paths: list, status: str, exclude: set[str], known: set[str]) -> pa.Table:
    """The rows of `status` in every part at `paths`, less the span_ids in `exclude`, in rank order
    (evidence_key), the first of each target only, none of a target in `known` (keys decided or
    sampled elsewhere): columns span_id and shard."""
    exclude = pa.array(sorted(exclude), pa.string())
    tables = [_shard(path, status, exclude) for path in paths]
    if not tables:
        return pa.table({"span_id": pa.array([], pa.string()), "shard": pa.array([], pa.int64())})
    table = pa.concat_tables(tables)
    del tables
    order = pc.sort_indices(table, sort_keys=ORDER)
    table = table.select(["span_id", "shard", "key"]).take(order)  # the rank's numbers are done with
    known = pa.array([bytes.fromhex(k) for k in sorted(known)], pa.binary(16))
    table = table.filter(pc.invert(pc.is_in(table.column("key"), value_set=known)))
    position = pa.array(np.arange(table.num_rows))
    first = (
        pa.table({"key": table.column("key"), "at": position})
        .group_by("key", use_threads=False)
        .aggregate([("at", "min")])
        .column("at_min")
    )
    return table.take(pc.take(first, pc.sort_indices(first))).select(
        ["span_id", "shard"]
    )  # first positions, in order


class SortedIds(Sequence):
    """The span ids of an Arrow column in code-point order, read one at a time (a stratum of millions
    sampled by random.sample without a Python list of them)."""

    def __init__(self, ids: pa.Array) -> None:
        self.ids = ids.take(pc.sort_indices(ids))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self.ids[i].to_pylist()
        return self.ids[i].as_py()
