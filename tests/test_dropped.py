"""The spans the screen dropped, held in Arrow (run/dropped.py), rank and deduplicate exactly as the rows
of measures/budget.py do, and the audit's draw from them is the draw from a Python list."""

import random

import pyarrow as pa
import pyarrow.parquet as pq

from scanner.measures import budget as bm
from scanner.measures import recall
from scanner.run.dropped import SortedIds, keys, ranked_distinct


def screen_rows(rng: random.Random, shard: int, n: int) -> list[dict]:
    """Rows with ties (a few match rates, NLLs and targets), nulls, certificates and both statuses."""
    out = []
    for i in range(n):
        certificate = rng.choice([None, 0, 3, 5, 8])
        out.append(
            {
                "span_id": f"{rng.randrange(16**6):06x}{shard:02x}{i:04x}",
                "shard": shard,
                "status": rng.choice(["screened_out", "screened_out", "not_searched"]),
                "target_tokens": 8,
                "certificate_tokens": certificate,
                "greedy_match_rate": rng.choice([None, 0.0, 0.25, 0.5, 0.5, 1.0]),
                "mean_nll": rng.choice([None, 1.0, 2.0, 2.0]),
                "target_ids": rng.choice([[1, 2, 3], [4, 5], [40000, 6, 7, 8], [9]]) + [i % 7],
            }
        )
    return out


def test_the_arrow_rank_and_copies_are_the_rows_rank_and_copies(tmp_path):
    rng = random.Random(0)
    parts = [screen_rows(rng, shard, 300) for shard in range(3)]
    paths = []
    for shard, rows in enumerate(parts):
        paths.append(tmp_path / f"part-{shard}.parquet")
        pq.write_table(pa.Table.from_pylist(rows), paths[-1])
    rows = [r for part in parts for r in part]
    exclude = {r["span_id"] for r in rng.sample(rows, 40)}
    known = {bm.target_key(r) for r in rng.sample(rows, 5)}
    wanted = [r for r in bm.rank(rows) if r["status"] == "screened_out" and r["span_id"] not in exclude]
    wanted, copies = bm.distinct(wanted, bm.target_key, dict.fromkeys(known, "elsewhere"))
    got = ranked_distinct(paths, "screened_out", exclude, known)
    assert copies and len(wanted) < 600, "the case holds copies and known targets"
    assert got.to_pylist() == [{"span_id": r["span_id"], "shard": r["shard"]} for r in wanted]


def test_a_key_is_the_rows_key_for_sliced_and_chunked_columns():
    ids = [[1, 2, 3], [40000, 5], [7], [], [2**40]]
    column = pa.chunked_array([pa.array(ids).slice(1, 3), pa.array(ids)])
    assert keys(column).to_pylist() == [bm.target_key({"target_ids": r}) for r in ids[1:4] + ids]


def test_the_draw_from_a_column_is_the_draw_from_a_list():
    rng = random.Random(1)
    ids = [f"{rng.randrange(16**12):012x}" for _ in range(5000)]
    parts = {"not_searched": ids[:300], "screened_out": ids[300:]}
    as_column = {"not_searched": ids[:300], "screened_out": pa.array(ids[300:])}
    order = lambda s: SortedIds(s) if isinstance(s, pa.Array) else sorted(s)  # noqa: E731
    for sample in (0, 7, 40):
        assert recall.plan_strata(as_column, sample, 3, order) == recall.plan_strata(parts, sample, 3)
