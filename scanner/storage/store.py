"""Committed parts inside the run directory: the ONE commit protocol of every phase, results included:

```
run_dir/
  screen/part-00000.parquet  screen/done/00000  screen/stats/00000.json    phase 1, one per shard
  certify/part-00000.parquet certify/done/00000 certify/stats/00000.json   phase 2, certificate units
  search/part-00000.parquet  search/done/00000  search/stats/00000.json    phase 2, search units (verdicts)
  audit/part-00000.parquet   audit/done/00000   audit/stats/00000.json     phase 2, the recall audit's units
  tighten/part-00000.parquet tighten/done/00000 tighten/stats/00000.json   phase 2, tighten units
  certify_plan.json  search_plan.json  tighten_plan.json                    the units, saved once
  audit_plan.json  recall.json                        the audit's draw (redrawn when what it sampled changed)
  results/part-00000.parquet done/00000       stats/00000.json             phase 3, one per shard
```

Each part is committed the same way (stats, then rows, then a done marker with the rows' sha256, each
atomically), so a kill at any moment leaves a part pending or done, and a relaunch checks every done
part against its marker (integrity.py) and redoes damaged ones. Rows have the results schema.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from scanner.schema import results_schema
from scanner.storage.atomic import TMP_SUFFIX, atomic_write, atomic_write_json, remove_file
from scanner.storage.integrity import file_sha256, read_json_object, reopen_damaged
from scanner.storage.records import cut_problem

log = logging.getLogger(__name__)

PHASES = ("screen", "certify", "search", "audit", "tighten")


@dataclass(frozen=True)
class Layout:
    """Where one store's files live under the run directory: every store commits the same way, only
    the folders differ (phase 3's results keep done/ and stats/ at the run directory's top level, where
    export, report and verify read them)."""

    parts: str  # folder of part-XXXXX.parquet
    done: str  # folder of the done markers
    stats: str  # folder of the stats files
    key: str  # the index's name in a done marker ("part", or "shard" for results)

    @classmethod
    def phase(cls, name: str) -> Layout:
        return cls(name, f"{name}/done", f"{name}/stats", "part")


RESULTS = Layout("results", "done", "stats", "shard")


class Store:
    """One store's parts, numbered from 0: a phase's or the results. A part of the screen or the results
    is a shard (a slice of the corpus), one of certify, search, audit or tighten a unit (candidates
    planned together, run/units.py). Holds only paths, so it pickles to any worker."""

    def __init__(self, run_path: str | Path, name: str, layout: Layout | None = None, schema=None) -> None:
        self.name, self.layout = name, layout or Layout.phase(name)
        self.schema = schema  # the parts' Arrow schema; None: the results schema
        self.root = Path(run_path)
        self.path = self.root / self.layout.parts

    def result_path(self, index: int) -> Path:
        return self.path / f"part-{index:05d}.parquet"

    def done_path(self, index: int) -> Path:
        return self.root / self.layout.done / f"{index:05d}"

    def stats_path(self, index: int) -> Path:
        return self.root / self.layout.stats / f"{index:05d}.json"

    def folders(self) -> tuple[Path, ...]:
        return self.path, self.root / self.layout.done, self.root / self.layout.stats

    def label(self, index: int) -> str:
        """A part as logs name it: a shard of the screen or the results, else a unit by its name (search-00003)."""
        return f"shard {index:05d}" if self.name in ("screen", "results") else f"{self.name}-{index:05d}"

    def done_parts(self) -> list[int]:
        folder = self.root / self.layout.done
        return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit()) if folder.is_dir() else []

    def done(self) -> set[int]:
        return set(self.done_parts())

    def reopen(self, index: int) -> None:
        remove_file(self.done_path(index))

    def prepare(self) -> dict[int, str]:
        """Folders made, temp files of a stopped writer removed, damaged parts made pending again."""
        for folder in self.folders():
            folder.mkdir(parents=True, exist_ok=True)
            for tmp in folder.glob(f".*{TMP_SUFFIX}"):
                log.info("removing %s, left by a writer that was stopped", tmp)
                remove_file(tmp)
        return reopen_damaged(self)

    def stats(self, index: int) -> dict:
        """A done part's stats; {} when unreadable or when its record of cut searches cannot be believed
        (a relaunch redoes such a part: integrity.py)."""
        stats = read_json_object(self.stats_path(index)) or {}
        return {} if "cut" in stats and cut_problem(stats["cut"]) else stats

    def write(self, index: int, table: pa.Table, stats: dict) -> None:
        """Commit one part: stats, then the rows, then the done marker with the rows' sha256, each
        atomically. Writing a part again replaces it; a kill at any point leaves it pending or done."""
        table = checked_table(f"{self.name} part {index:05d}", table, self.schema)
        # Without the old marker, a kill mid-rewrite leaves the part pending, not done with new rows.
        remove_file(self.done_path(index))
        atomic_write_json(self.stats_path(index), {"rows": table.num_rows, **stats})
        atomic_write(self.result_path(index), lambda f: pq.write_table(table, f))
        # The checksum lets a relaunch tell a whole file from one damaged since (integrity.py).
        marker = {
            self.layout.key: index,
            "rows": table.num_rows,
            "file": f"{self.layout.parts}/{self.result_path(index).name}",
            "sha256": file_sha256(self.result_path(index)),
        }
        atomic_write_json(self.done_path(index), marker)
        log.info("%s part %05d done: %d rows", self.name, index, table.num_rows)

    def read(self, index: int, span_ids: set[str] | None = None) -> pa.Table:
        table = pq.read_table(self.result_path(index))
        if span_ids is None:
            return table
        import pyarrow.compute as pc

        return table.filter(pc.is_in(table.column("span_id"), value_set=pa.array(sorted(span_ids))))

    def rows(self, indices=None) -> list[dict]:
        """Rows of the done parts (all, or those in `indices`), in part order."""
        wanted = self.done_parts() if indices is None else sorted(set(indices) & self.done())
        return [row for i in wanted for row in self.read(i).to_pylist()]


def checked_table(what: str, table: pa.Table, schema: pa.Schema | None = None) -> pa.Table:
    """The table with the results schema's (or `schema`'s) field docs and the caller's metadata
    (provenance), or ValueError naming the fields that differ from it."""
    schema = schema or results_schema()
    if not table.schema.equals(schema, check_metadata=False):
        diff = sorted(set(map(str, table.schema)) ^ set(map(str, schema)))
        raise ValueError(f"{what}: the table does not have the results schema; differing fields: {diff[:6]}")
    metadata = {**schema.metadata, **(table.schema.metadata or {})}
    return pa.Table.from_arrays(table.columns, schema=schema.with_metadata(metadata))


def has_work(run_path: Path) -> bool:
    """Any phase part done: a run with such work is not started afresh on a changed configuration."""
    return any(Store(run_path, name).done_parts() for name in PHASES)
