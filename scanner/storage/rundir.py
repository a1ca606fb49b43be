"""The run directory: the state that makes a scan resumable and a relaunch of the same command idempotent.

```
run_dir/
  run_config.json              the run's identity (configuration, corpus fingerprint, row counts, schema
                               version, the model files' digest) under one sha256 (run_hash), package version
  plan.json                    the shard plan, saved once and checked (never recomputed) on resume
  results/part-00000.parquet   one file per finished shard, written atomically
  done/00000                   completion marker (rows, sha256 of the results file), written last
  lock                         the live writer's host and pid (lock.py)
  logs/shard-00000.log         per-shard log (written by the caller)
  stats/00000.json             per-shard stats, merged into stats.json
  screen/ certify/ search/     the phases' own committed parts and plans (store.py, run/units.py)
```

A shard counts as finished only when its done marker exists; everything else (a results file without a
marker, stats of a killed shard, hidden `*.tmp` files) is ignored by readers, so a writer killed at any
moment leaves a directory that a relaunch completes without duplicate rows. One driver per run
directory at a time (the lock): `prepare` deletes temp files, which would break a second live writer.
A relaunch checks each finished shard against its marker and redoes damaged ones (integrity.py).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from scanner import __version__
from scanner.config import ScanConfig, from_saved
from scanner.errors import InputError, require
from scanner.schema import SCHEMA_VERSION, results_schema
from scanner.storage.atomic import TMP_SUFFIX, atomic_write_json, remove_file
from scanner.storage.integrity import part_problem, read_json_object, reopen_damaged
from scanner.storage.progress import GIVEN_UP_FILE
from scanner.storage.records import RECALL, read_record
from scanner.storage.store import PHASES, RESULTS, Store, has_work

log = logging.getLogger(__name__)

CONFIG_FILE = "run_config.json"
PLAN_FILE = "plan.json"
STATS_FILE = "stats.json"
FOLDERS = ("results", "done", "logs", "stats")
PHASE_PLANS = ("certify_plan.json", "search_plan.json", "tighten_plan.json")  # scanner/run/units.py
AUDIT_PLAN, RECALL_FILE = "audit_plan.json", "recall.json"  # the recall audit's draw and its estimate
STOP_FILE = "search_stop.json"  # where --search-budget auto stopped, and why (run/spend.py AutoStop.record)
# Everything a scan writes at the top of its run directory (lock: storage/lock.py; provenance.json:
# run/driver.py; passages.parquet: storage/passages.py; the phases' folders: store.py; given_up.json:
# storage/progress.py).
RUN_ENTRIES = {
    CONFIG_FILE,
    PLAN_FILE,
    STATS_FILE,
    *FOLDERS,
    *PHASE_PLANS,
    AUDIT_PLAN,
    RECALL_FILE,
    STOP_FILE,
    *PHASES,
    "lock",
    "provenance.json",
    GIVEN_UP_FILE,
    "passages.parquet",
    "progress",
    "model.json",
}
FIX = "use a new --out or delete it"
SHOWN_VALUE = 60  # characters of a changed value shown in the error; nested configs can be long


@dataclass(frozen=True)
class Shard:
    """Documents [doc_start, doc_end) by global index in corpus order."""

    shard: int
    doc_start: int
    doc_end: int

    @property
    def name(self) -> str:
        return f"{self.shard:05d}"

    @property
    def num_docs(self) -> int:
        return self.doc_end - self.doc_start


@dataclass(frozen=True, kw_only=True)
class Plan:
    shards: tuple[Shard, ...]

    @classmethod
    def make(cls, num_docs: int, docs_per_shard: int) -> Plan:
        require(
            isinstance(docs_per_shard, int) and docs_per_shard >= 1,
            f"docs_per_shard {docs_per_shard!r} must be a whole number >= 1; pass --docs-per-shard 1000",
        )
        if num_docs < 0:
            raise ValueError(f"num_docs {num_docs} must be >= 0")
        starts = range(0, num_docs, docs_per_shard)
        return cls(shards=tuple(Shard(i, a, min(a + docs_per_shard, num_docs)) for i, a in enumerate(starts)))

    @property
    def num_docs(self) -> int:
        return self.shards[-1].doc_end if self.shards else 0

    def __len__(self) -> int:
        return len(self.shards)

    def __iter__(self) -> Iterator[Shard]:
        return iter(self.shards)

    def to_json(self) -> list[dict]:
        return [{"shard": s.shard, "doc_start": s.doc_start, "doc_end": s.doc_end} for s in self.shards]

    @classmethod
    def from_json(cls, data, source: str = PLAN_FILE) -> Plan:
        """Parse and check a saved plan: shards numbered 0..n-1 covering the documents without gap or overlap."""
        try:
            shards = tuple(Shard(int(d["shard"]), int(d["doc_start"]), int(d["doc_end"])) for d in data)
        except (TypeError, KeyError, ValueError) as err:
            raise InputError(
                f"{source} is not a shard plan ({err!r}); expected a list of "
                f'{{"shard", "doc_start", "doc_end"}}; the run directory is damaged, {FIX}'
            ) from err
        end = 0
        for i, shard in enumerate(shards):
            require(
                shard.shard == i and shard.doc_start == end and shard.doc_end > shard.doc_start,
                f"{source}: shard entry {i} is {shard}, expected shard {i} starting at document {end}; "
                f"the run directory is damaged, {FIX}",
            )
            end = shard.doc_end
        return cls(shards=shards)

    def save(self, path: str | Path) -> None:
        atomic_write_json(path, self.to_json())

    @classmethod
    def load(cls, path: str | Path) -> Plan:
        return cls.from_json(_read_json(Path(path)), source=str(path))


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise InputError(f"cannot read {path} ({err}); the run directory is damaged, {FIX}") from err


def config_hash(config: dict) -> str:
    """sha256 of the canonical JSON of the configuration (sorted keys, so dict order does not matter)."""
    try:
        blob = json.dumps(config, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as err:
        raise TypeError(f"the run configuration must be JSON-able (no live objects, no NaN): {err}") from err
    return hashlib.sha256(blob.encode()).hexdigest()


def run_identity(config: dict) -> dict:
    """The configuration less the corpus path: the corpus is identified by its fingerprint, so the same
    files given by a relative or an absolute path, or moved, resume the same run."""
    corpus = config.get("corpus")
    if not isinstance(corpus, dict):
        return config
    return {**config, "corpus": {k: v for k, v in corpus.items() if k != "path"}}


# What a run's rows depend on besides its configuration, each sealed under the one run_hash: a hand edit
# of any of them (another corpus's fingerprint, another model's digest) breaks the hash, and a relaunch,
# compare or export refuses the run rather than mixing or relabelling its rows.
SEALED = ("corpus_fingerprint", "num_docs", "docs_per_shard", "schema_version", "model_files")


def run_hash(saved: dict) -> str:
    """sha256 of the run's identity: its configuration less the corpus path (run_identity) and SEALED."""
    return config_hash({"config": run_identity(saved["config"]), **{k: saved.get(k) for k in SEALED}})


def _sealed(saved: dict) -> dict:
    return {**saved, "run_hash": run_hash(saved)}


def _hash_holds(saved: dict) -> bool:
    """Whether run_config.json still gives its recorded run_hash (over the whole identity, SEALED)."""
    try:
        return "run_hash" in saved and saved["run_hash"] == run_hash(saved)
    except TypeError:  # NaN or a live object: not what a scan writes
        return False


_ABSENT = object()


def _shown(value) -> str:
    text = "<absent>" if value is _ABSENT else json.dumps(value, sort_keys=True)
    return text if len(text) <= SHOWN_VALUE else text[: SHOWN_VALUE - 1] + "…"


def changed_keys(old: dict, new: dict, prefix: str = "") -> list[str]:
    """'key old -> new' for each differing key; nested dicts by dotted path (search.top_k 64 -> 32)."""
    changes = []
    for key in sorted(set(old) | set(new), key=str):
        before, after = old.get(key, _ABSENT), new.get(key, _ABSENT)
        if isinstance(before, dict) and isinstance(after, dict):
            changes += changed_keys(before, after, f"{prefix}{key}.")
        elif before != after:
            changes.append(f"{prefix}{key} {_shown(before)} -> {_shown(after)}")
    return changes


def _config_problems(
    saved: dict, config: dict, fingerprint: str, docs_per_shard: int, model_files: str | None
) -> tuple[str, str]:
    """(what differs from the saved run, how to fix it); empty when the run can resume."""
    problems = []
    if None not in (saved.get("model_files"), model_files) and saved["model_files"] != model_files:
        # run/model_record.py names the files that differ first; this is what a hand-edited model.json leaves
        problems.append(
            f"was scanned with other model files (their digest {saved['model_files'][:12]} -> "
            f"{model_files[:12]}; its model.json lists each file's sha256)"
        )
    # A JSON round trip makes tuples lists, as they are in the saved copy.
    old = {**_resumable(run_identity(saved["config"])), "docs_per_shard": saved.get("docs_per_shard")}
    new = {**_resumable(json.loads(json.dumps(run_identity(config)))), "docs_per_shard": docs_per_shard}
    if old != new:
        problems.append(f"was made with another configuration (changed: {', '.join(changed_keys(old, new))})")
    if saved.get("corpus_fingerprint") != fingerprint:
        problems.append(
            f"was made from another corpus: the corpus changed (files added, removed or "
            f"rewritten; fingerprint {str(saved.get('corpus_fingerprint'))[:12]} -> "
            f"{fingerprint[:12]})"
        )
        return "; and ".join(problems), f"restore the original corpus files, {FIX}"
    if problems and saved.get("model_files") != model_files:
        return "; and ".join(problems), f"restore the model's files, {FIX}"
    return "; and ".join(problems), FIX


# What a relaunch may change: how much search to spend, not what is searched (the plans do not
# depend on it); a larger budget goes on where the last run's budget stopped, and a changed audit sample
# is drawn again (run/audit.py).
RELAUNCH_MAY_CHANGE = ("search_budget", "audit_sample")


def _resumable(identity: dict) -> dict:
    return {k: v for k, v in identity.items() if k not in RELAUNCH_MAY_CHANGE}


def _version_problem(saved: dict) -> str:
    """Why the saved run's results cannot be extended by this acr-scanner: another results schema (its
    finished parts would mix two tables); empty when the versions agree."""
    version = saved.get("schema_version")
    if version == SCHEMA_VERSION:
        return ""
    old = version if version is not None else "(unrecorded)"
    made_by = saved.get("package_version") or "unrecorded"
    return (
        f"was made with results schema version {old} but this acr-scanner writes version {SCHEMA_VERSION}, "
        "so its finished parts cannot be resumed into one table; start a new --out, or rerun with the "
        f"acr-scanner that writes schema version {old} (the run was started by acr-scanner {made_by})"
    )


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _add(total: dict, stats: dict) -> None:
    """Sum numbers into `total`, nested dicts (such as status_counts) per key; other values are dropped."""
    for key, value in stats.items():
        if _is_number(value):
            total[key] = total.get(key, 0) + value
        elif isinstance(value, dict):
            _add(total.setdefault(key, {}), value)


def _eta(stats: dict, remaining: int, workers: int) -> tuple[float | None, float | None]:
    """(spans per work second, seconds to finish the remaining shards); None where not yet known."""
    seconds, done = stats.get("seconds", 0), stats["shards_done"]
    spans = stats.get("spans", stats.get("rows"))
    if not done or not seconds or spans is None:
        return None, None
    # Remaining shards are assumed as large as the finished ones on average.
    return spans / seconds, remaining * (seconds / done) / workers


class RunDir:
    """Paths and operations on one run directory. Holds only its path, so it pickles to any worker."""

    def __init__(self, path: str | Path) -> None:
        # Path("s3://b/x") would silently become a local folder named "s3:"; atomic commits rest on
        # rename and fsync, which object stores do not offer.
        require(
            bool(str(path).strip()), "the run directory path is empty; pass a folder, e.g. --out runs/books"
        )
        scheme = str(path).split("://", 1)[0] if "://" in str(path) else None
        require(
            scheme is None or scheme == "file",
            f"run directory '{path}' is a {scheme}:// URI; the run "
            "directory must be a path on a file system that every worker mounts (local disk, NFS, EFS, "
            "Lustre, a ReadWriteMany volume); write there and copy results/ to object storage after",
        )
        self.path = Path(str(path).removeprefix("file://"))
        self.results = Store(self.path, "results", RESULTS)  # phase 3, committed like every phase

    def result_path(self, shard: int) -> Path:
        return self.results.result_path(shard)

    def done_path(self, shard: int) -> Path:
        return self.results.done_path(shard)

    def stats_path(self, shard: int) -> Path:
        return self.results.stats_path(shard)

    def log_path(self, shard: int) -> Path:
        return self.path / "logs" / f"shard-{shard:05d}.log"

    def prepare(
        self,
        config: dict,
        corpus_fingerprint: str,
        num_docs: int,
        docs_per_shard: int,
        model_files: str | None = None,
    ) -> Plan:
        """Create the directory, or check that it belongs to this configuration, corpus and model (the
        digest of its files, engine/identity.py files_digest; None: a run of no recorded model); return the plan."""
        config_hash(config)  # a config that is not JSON-able fails before any folder is made
        require(not self.path.is_file(), f"RUN_DIR '{self.path}' is a file; pass a folder path as --out")
        for folder in FOLDERS:
            (self.path / folder).mkdir(parents=True, exist_ok=True)
        self._clean_temp_files()
        identity = {
            "corpus_fingerprint": corpus_fingerprint,
            "num_docs": num_docs,
            "docs_per_shard": docs_per_shard,
            "model_files": model_files,
        }
        if not (self.path / CONFIG_FILE).exists():
            return self._create(config, identity)
        return self._resume(config, identity)

    def _clean_temp_files(self) -> None:
        for folder in (self.path, *(self.path / name for name in FOLDERS if name != "logs")):
            for tmp in folder.glob(f".*{TMP_SUFFIX}"):
                log.info("removing %s, left by a writer that was stopped", tmp)
                remove_file(tmp)

    def _create(self, config: dict, identity: dict) -> Plan:
        require(
            not self.done_shards(),
            f"RUN_DIR '{self.path}' has finished shards in done/ but no "
            f"{CONFIG_FILE}; it is damaged or was not made by acr-scan; {FIX}",
        )
        plan = Plan.make(identity["num_docs"], identity["docs_per_shard"])
        for stale in (
            *PHASE_PLANS,
            AUDIT_PLAN,
        ):  # units planned by an older configuration whose parts never finished
            remove_file(self.path / stale)
        saved = _sealed(
            {
                "config": config,
                **identity,
                "package_version": __version__,
                "schema_version": SCHEMA_VERSION,
                "created_at": datetime.now(UTC).isoformat(),
            }
        )
        # The plan first: run_config.json is what makes the directory count as prepared.
        plan.save(self.path / PLAN_FILE)
        atomic_write_json(self.path / CONFIG_FILE, saved)
        log.info("new run %s: %d documents in %d shards", self.path, identity["num_docs"], len(plan))
        return plan

    def _resume(self, config: dict, identity: dict) -> Plan:
        saved = self.saved_config()
        fingerprint, num_docs = identity["corpus_fingerprint"], identity["num_docs"]
        problems, fix = _config_problems(
            saved, config, fingerprint, identity["docs_per_shard"], identity["model_files"]
        )
        version = _version_problem(saved)
        if (problems or version) and not self.done_shards() and not has_work(self.path):
            # Nothing of the old run can be lost (e.g. a model that failed to load): the corrected
            # command starts it afresh instead of being refused as a change.
            log.warning(
                "run %s %s, but none of its shards finished; starting it afresh",
                self.path,
                problems or version,
            )
            return self._create(config, identity)
        require(not version, f"RUN_DIR '{self.path}' {version}")
        require(not problems, f"RUN_DIR '{self.path}' {problems}; {fix}")
        plan = self._saved_plan(saved, num_docs)
        require(
            plan.num_docs == num_docs,
            f"RUN_DIR '{self.path}': {PLAN_FILE} covers {plan.num_docs} "
            f"documents but the corpus has {num_docs}; the corpus changed, {FIX}",
        )
        reopen_damaged(self.results)
        self._reseal(saved, config)
        if saved.get("package_version") != __version__:
            log.warning(
                "run %s was started by acr-scanner %s, resuming with %s",
                self.path,
                saved.get("package_version"),
                __version__,
            )
        log.info("resuming run %s: %d of %d shards done", self.path, len(self.done_shards()), len(plan))
        return plan

    def _reseal(self, saved: dict, config: dict) -> None:
        """run_config.json rewritten where a relaunch changed what it may (RELAUNCH_MAY_CHANGE: status and
        report read the budget the run now goes on with), sealed again with the changed configuration."""
        changed = {k: config.get(k) for k in RELAUNCH_MAY_CHANGE if saved["config"].get(k) != config.get(k)}
        if changed:
            log.info("run %s resumes with %s", self.path, ", ".join(f"{k} {v}" for k, v in changed.items()))
        now = _sealed({**saved, "config": {**saved["config"], **changed}})
        if now != saved:
            atomic_write_json(self.path / CONFIG_FILE, now)

    def _saved_plan(self, saved: dict, num_docs: int) -> Plan:
        if (self.path / PLAN_FILE).exists():
            return Plan.load(self.path / PLAN_FILE)
        # The plan is a function of the saved document count and shard size (both checked above), so a
        # lost plan.json is rebuilt rather than costing the finished shards.
        plan = Plan.make(saved.get("num_docs", num_docs), saved["docs_per_shard"])
        log.warning("run %s had lost its %s; rebuilt it from %s", self.path, PLAN_FILE, CONFIG_FILE)
        plan.save(self.path / PLAN_FILE)
        return plan

    def saved_config(self) -> dict:
        """run_config.json, checked to be a run configuration (InputError naming the file if not)."""
        saved = _read_json(self.path / CONFIG_FILE)
        require(
            isinstance(saved, dict) and isinstance(saved.get("config"), dict),
            f"{self.path / CONFIG_FILE} is not a run configuration (a JSON object with a 'config' "
            f"object); the run directory is damaged, {FIX}",
        )
        require(
            _hash_holds(saved),
            f"{self.path / CONFIG_FILE} was edited after the run started: what it says "
            "the run is (configuration, corpus fingerprint, row counts, schema version, model files' digest) no "
            "longer gives the run_hash recorded beside it, so the finished results were made from another "
            f"configuration, corpus or model than the file says; restore the file as the scan wrote it, or {FIX}",
        )
        return saved

    def scan_config(self) -> ScanConfig:
        """The run's ScanConfig, read back from run_config.json (config.from_saved)."""
        return from_saved(ScanConfig, self.saved_config()["config"], str(self.path / CONFIG_FILE))

    def require_run(self) -> None:
        """InputError unless this is a scan's run directory (for the commands that only read one)."""
        require(
            self.path.is_dir() and (self.path / CONFIG_FILE).is_file(),
            f"'{self.path}' is not a run directory (no {CONFIG_FILE}); pass the --out folder of "
            "`acr-scan scan`",
        )

    def require_own_folder(self) -> None:
        """InputError unless --out is absent, empty, a run directory (run_config.json: resume checks it),
        or one a scan stopped before writing run_config.json (its own entries only): a scan never mixes
        its files with others' (a plan's folder, a folder of documents)."""
        if not self.path.is_dir() or (self.path / CONFIG_FILE).is_file():
            return
        foreign = foreign_entries(self.path, RUN_ENTRIES, unrecorded=True)
        require(
            not foreign,
            f"--out {self.path} holds files that are not a run directory's "
            f"({', '.join(map(repr, foreign[:3]))}{', ...' if len(foreign) > 3 else ''}; a run directory "
            f"without {CONFIG_FILE} holds only empty folders); a scan writes into a new folder, an empty one or "
            "its own run directory: pass a new --out",
        )

    def reopen(self, shard: int) -> None:
        """Make a finished shard pending again (its files are rewritten when it runs)."""
        self.results.reopen(shard)

    def recall(self) -> dict | None:
        """recall.json (run/audit.py write_recall): what the recall audit estimates the unsearched still
        hold; None before the audit's results are written, or without an audit."""
        return read_record(self.path / RECALL_FILE, RECALL)

    def load_plan(self) -> Plan:
        require(
            (self.path / PLAN_FILE).exists(),
            f"'{self.path}' is not a run directory (no {PLAN_FILE}); pass the --out folder of a scan",
        )
        return Plan.load(self.path / PLAN_FILE)

    def done_shards(self) -> list[int]:
        """The shards whose results are written (phase 3)."""
        return self.results.done_parts()

    def pending(self, plan: Plan) -> list[Shard]:
        done = set(self.done_shards())
        return sorted((s for s in plan if s.shard not in done), key=lambda s: s.shard)

    def shard_stats(self, shard: int) -> dict:
        """A finished shard's stats; {} when unreadable (a relaunch redoes such a shard)."""
        return self.results.stats(shard)

    def write_shard(self, shard: int, table: pa.Table, stats: dict) -> None:
        """Commit one shard's results through the one commit protocol (store.py)."""
        if not isinstance(shard, int) or shard < 0:
            raise ValueError(f"shard {shard!r} must be an int >= 0")
        shards = table.column("shard").unique().to_pylist() if "shard" in table.column_names else []
        if shards not in ([], [shard]):
            raise ValueError(
                f"shard {shard:05d}: rows carry shard values {shards[:6]}, expected only {shard}"
            )
        self.results.write(shard, table, stats)

    def read_results(self, columns: list[str] | None = None, where=None) -> pa.Table:
        """All finished shards in shard order. Schema metadata keeps provenance that every shard shares.
        `where`: a pyarrow.compute expression each shard's rows are filtered by as it is read (a library's
        millions of rows are never held whole for the few a reader wants)."""
        schema = results_schema()
        unknown = [c for c in columns or [] if c not in schema.names]
        require(
            not unknown, f"columns {unknown} are not in the results; columns are [{', '.join(schema.names)}]"
        )
        tables = [self._read_shard(shard, columns, where) for shard in self.done_shards()]
        if not tables:
            empty = schema.empty_table()
            return empty.select(columns) if columns is not None else empty
        metadata = _shared_metadata([t.schema.metadata or {} for t in tables])
        return pa.concat_tables([t.replace_schema_metadata(metadata) for t in tables])

    def _read_shard(self, shard: int, columns: list[str] | None, where=None) -> pa.Table:
        path = self.result_path(shard)
        require(
            path.exists(),
            f"shard {shard:05d} is marked done but {path} is missing; relaunch the "
            "scan (the same command) to compute it again",
        )
        try:
            return pq.read_table(path, columns=columns, filters=where)
        except Exception as err:  # pyarrow's errors for a damaged file vary (ArrowInvalid, OSError, ...)
            raise InputError(
                f"shard {shard:05d}: {path} is damaged ({type(err).__name__}: {err}); relaunch "
                "the scan (the same command) to compute it again"
            ) from err

    def merge_stats(self) -> dict:
        """Sum the stats of finished shards, write stats.json and return it."""
        merged = self._merged_stats()
        atomic_write_json(self.path / STATS_FILE, merged)
        return merged

    def damaged(self) -> dict[int, str]:
        """{shard: cause} of the finished shards whose results file is missing, cut short or of another
        row count than their done marker says (integrity.part_problem without the sha256): what
        export, report and verify refuse and a relaunch computes again."""
        return {s: why for s in self.done_shards() if (why := part_problem(self.results, s, hashed=False))}

    def _merged_stats(self, skip=()) -> dict:
        done = [s for s in self.done_shards() if s not in skip]
        total: dict = {}
        for shard in done:
            stats = read_json_object(self.stats_path(shard))
            if stats is not None:
                _add(total, stats)
            else:
                log.warning(
                    "shard %05d is done but its stats file %s is missing or unreadable; a "
                    "relaunch of the scan computes the shard again",
                    shard,
                    self.stats_path(shard),
                )
        total["shards_done"] = len(done)
        total["shards_total"] = len(self.load_plan())
        return total

    def status(self, workers: int = 1) -> dict:
        """Progress from the stats of finished shards, without writing anything. `elapsed_s` is work
        seconds summed over shards; the ETA divides the remaining work by `workers` running at once."""
        require(workers >= 1, f"workers {workers} must be >= 1")
        damaged = self.damaged()  # not counted: their rows cannot be read
        stats = self._merged_stats(skip=damaged)
        done, total = stats["shards_done"], stats["shards_total"]
        throughput, eta = _eta(stats, total - done, workers)
        return {
            "shards_done": done,
            "shards_total": total,
            "rows": stats.get("rows", 0),
            "status_counts": stats.get("status_counts", {}),
            "elapsed_s": stats.get("seconds", 0),
            "spans_per_s": throughput,
            "eta_s": eta,
            "damaged_shards": {
                f"{s:05d}": f"{why}; relaunch the scan (the same command) to compute it again"
                for s, why in damaged.items()
            },
        }


def foreign_entries(folder: Path, own: set[str], unrecorded: bool = False) -> list[str]:
    """The names in `folder` that are neither in `own` nor a writer's hidden temp file. `unrecorded`: the
    folder lacks its writer's first record (run_config.json, compare.json), so an own name that is a link
    or a folder holding anything counts too: a writer stopped before that record left only empty folders,
    so a results/ or logs/ with files is a user's, which the writer's files would mix with."""

    def foreign(entry: Path) -> bool:
        if entry.name.startswith(".") and entry.name.endswith(TMP_SUFFIX):
            return False
        if entry.name not in own:
            return True
        return unrecorded and (entry.is_symlink() or (entry.is_dir() and any(entry.iterdir())))

    return sorted(p.name for p in folder.iterdir() if foreign(p))


def _shared_metadata(metadatas: list[dict]) -> dict:
    first = metadatas[0]
    return {k: v for k, v in first.items() if all(m.get(k) == v for m in metadatas[1:])}
