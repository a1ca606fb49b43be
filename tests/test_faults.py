"""Faults and bad inputs, table-driven, through the CLI as a user meets them.

Each case damages something (an argument, the run directory, the environment), runs `acr-scan`, and
asserts the exit code and what the message names; then it repairs the damage and relaunches the same
scan, which must end in the table of an uninterrupted run. One small corpus (a canary inside word
salad, and salad alone) keeps a scan to seconds.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from clirun import cli

from scanner.schema import WALL_CLOCK
from scanner.storage.lock import holder_of
from scanner.studies.tiny import CANARIES, salad

SCAN = [
    "--span-tokens",
    "12",
    "--stride",
    "3",
    "--context-tokens",
    "12",
    "--docs-per-shard",
    "1",
    "--min-match-rate",
    "0.9",
    "--max-candidates-per-doc",
    "1",
    "--steps",
    "30",
    "--candidates",
    "64",
    "--top-k",
    "64",
    "--restarts",
    "0",
]


# Ids a spreadsheet would run as formulas: the CSV export must defuse them.
IDS = ('=HYPERLINK("http://x")', "@SUM(A1)")


def write_corpus(path: Path, ids=IDS, salad_docs: int = 0) -> Path:
    rng = random.Random(7)
    texts = [f"{salad(rng, 8)}\n{CANARIES[1]}\n{salad(rng, 6)}", salad(rng, 20)]
    texts += [salad(rng, 20) for _ in range(salad_docs)]
    ids = list(ids) + [f"salad-{i}" for i in range(salad_docs)]
    pq.write_table(pa.table({"id": ids, "text": texts}), path)
    return path


def comparable(run: Path) -> list[dict]:
    # Without the wall-clock columns (screen_s, search_s, calibration_s, ...), which differ between runs.
    rows = [
        {k: v for k, v in r.items() if k not in WALL_CLOCK}
        for r in pq.read_table(run / "results").to_pylist()
    ]
    return sorted(rows, key=lambda r: r["span_id"])


@pytest.fixture(scope="module")
def reference(tiny_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    corpus = write_corpus(root / "corpus.parquet")
    done = cli("scan", str(corpus), "--model", str(tiny_dir), "--out", str(root / "ref"), *SCAN)
    assert done.returncode == 0, done.stderr
    (root / "scan.stderr").write_text(done.stderr)  # its progress bar, for the test of the bar
    rows = comparable(root / "ref")
    assert any(r["memorized"] for r in rows), "the reference run must hold evidence to protect"
    return corpus, rows, root / "ref"


@dataclass
class Case:
    """damage(ctx) prepares the fault and may return extra arguments; repair(ctx) undoes it."""

    name: str
    damage: object
    code: int
    says: tuple[str, ...]
    repair: object = None
    scanned_first: bool = False  # damage a finished run rather than an empty folder
    args: list = field(default_factory=list)


def _garble(path: Path, text: str = "{not json") -> None:
    path.write_text(text)


def _lock_of(ctx, pid: int, **holder) -> None:
    """A lock naming process `pid` of this host as a scan writes it (its start time, boot and command
    line), `holder` replacing any of them; one written by hand names only host, pid and since."""
    (ctx["out"]).mkdir(parents=True, exist_ok=True)
    (ctx["out"] / "lock").write_text(json.dumps({**holder_of(pid), **holder}))


def _unrelated(ctx) -> int:
    """A live process that is no scan (`sleep`); the case's repair ends it."""
    ctx["sleep"] = subprocess.Popen(["sleep", "300"])
    return ctx["sleep"].pid


def _end_sleep(ctx) -> None:
    ctx["sleep"].kill()
    ctx["sleep"].wait()


def _by_hand(ctx, pid: int) -> None:
    (ctx["out"] / "lock").write_text(json.dumps({"host": socket.gethostname(), "pid": pid, "since": "then"}))


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


CASES = [
    Case("stride-beyond-span", lambda ctx: ["--stride", "20"], 2, ("--stride 20", "--allow-gaps")),
    Case(
        "span-beyond-context",
        lambda ctx: ["--span-tokens", "200", "--context-tokens", "100"],
        2,
        ("does not fit the model's context of 256", "--span-tokens"),
    ),
    Case(
        "out-under-a-file",
        lambda ctx: (ctx["root"] / "f").write_text("") or ["--out", str(ctx["root"] / "f" / "run")],
        2,
        ("Not a directory", "a part of the path is a file"),
    ),
    Case(
        "live-lock",
        lambda ctx: _lock_of(ctx, os.getpid()),
        2,
        (f"in use by acr-scan pid {os.getpid()}", "delete"),
        repair=lambda ctx: (ctx["out"] / "lock").unlink(),
        scanned_first=True,
    ),
    Case(
        "stale-lock",
        lambda ctx: _lock_of(ctx, _dead_pid()),
        0,
        ("taking over the lock", "no longer runs"),
        scanned_first=True,
    ),
    # The pid of a killed scan, taken since by another process: the start time tells them apart.
    Case(
        "lock-pid-reused",
        lambda ctx: _lock_of(ctx, _unrelated(ctx), started=1),
        0,
        ("taking over the lock", "is now another process (sleep 300)"),
        repair=_end_sleep,
        scanned_first=True,
    ),
    # A lock written by hand (no start time) naming a live process that is no acr-scan.
    Case(
        "lock-of-another-process",
        lambda ctx: _by_hand(ctx, _unrelated(ctx)),
        0,
        ("taking over the lock", "is now another process (sleep 300)"),
        repair=_end_sleep,
        scanned_first=True,
    ),
    Case(
        "garbage-run-config",
        lambda ctx: _garble(ctx["out"] / "run_config.json", "[]"),
        2,
        ("run_config.json is not a run configuration",),
        scanned_first=True,
        repair=lambda ctx: shutil.copy(ctx["saved"] / "run_config.json", ctx["out"] / "run_config.json"),
    ),
    Case(
        "garbage-stats",
        lambda ctx: _garble(ctx["out"] / "stats" / "00000.json"),
        0,
        ("shard 00000 was marked done but its stats file", "computed again"),
        scanned_first=True,
    ),
    Case(
        "corrupt-results",
        lambda ctx: _garble(ctx["out"] / "results" / "part-00001.parquet", "PAR1xxxxPAR1"),
        0,
        ("shard 00001 was marked done but part-00001.parquet changed", "computed again"),
        scanned_first=True,
    ),
    Case(
        "truncated-results",
        lambda ctx: _truncate(ctx["out"] / "results" / "part-00000.parquet"),
        0,
        ("shard 00000 was marked done",),
        scanned_first=True,
    ),
    Case(
        "garbage-done-marker",
        lambda ctx: _garble(ctx["out"] / "done" / "00001"),
        0,
        ("done marker is unreadable",),
        scanned_first=True,
    ),
    Case(
        "lost-plan",
        lambda ctx: (ctx["out"] / "plan.json").unlink(),
        0,
        ("rebuilt it from run_config.json",),
        scanned_first=True,
    ),
    # A killed run's unit progress (its worker gone): removed under the lock before any unit starts.
    Case(
        "stale-progress",
        lambda ctx: _stale_progress(ctx["out"]),
        0,
        ("progress/search-00000.json: left by a worker that stopped",),
        scanned_first=True,
    ),
    Case(
        "corpus-by-another-path",
        lambda ctx: ["--out", "run", "CORPUS=" + os.path.relpath(ctx["corpus"], ctx["root"])],
        0,
        (),
        scanned_first=True,
    ),
]


def _stale_progress(out: Path) -> None:
    (out / "progress").mkdir(exist_ok=True)
    (out / "progress" / "search-00000.json").write_text(
        json.dumps(
            {"unit": "search-00000", "pid": _dead_pid(), "heartbeat": 1.0, "candidates_done": 0, "live": []}
        )
    )


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _command(ctx, extra: list[str]) -> list[str]:
    corpus = next((a.split("=", 1)[1] for a in extra if a.startswith("CORPUS=")), str(ctx["corpus"]))
    extra = [a for a in extra if not a.startswith("CORPUS=")]
    out = ["--out", str(ctx["out"])] if "--out" not in extra else []
    return ["scan", corpus, "--model", ctx["model"], *out, *SCAN, *extra]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_fault_is_reported_then_the_run_resumes_to_the_reference_table(case, reference, tiny_dir, tmp_path):
    corpus_src, want, finished = reference
    corpus = shutil.copy(corpus_src, tmp_path / "corpus.parquet")
    ctx = {"root": tmp_path, "out": tmp_path / "run", "corpus": Path(corpus), "model": str(tiny_dir)}
    if case.scanned_first:  # a copy of the finished reference run (what a scan leaves) is damaged
        shutil.copytree(finished, ctx["out"])
        ctx["saved"] = finished
    extra = case.damage(ctx) or []
    got = cli(*_command(ctx, list(extra)), cwd=tmp_path)
    assert got.returncode == case.code, got.stderr[-3000:]
    for text in case.says:
        assert text in got.stderr, (text, got.stderr[-3000:])
    assert "internal error" not in got.stderr and "Traceback" not in got.stderr
    if case.code == 2 and not case.scanned_first:
        assert not ctx["out"].exists(), "a refused command leaves no run directory behind"
        return  # nothing was made, nothing to resume
    if case.repair:
        case.repair(ctx)
    if case.code != 0:  # a refused relaunch: once repaired, the same command resumes
        again = cli(*_command(ctx, []))
        assert again.returncode == 0, again.stderr[-3000:]
    assert comparable(ctx["out"]) == want
    assert not (ctx["out"] / "lock").exists(), "the lock is released"
    assert not list((ctx["out"] / "progress").glob("*.json")), "no unit's progress outlives the scan"


def test_status_does_not_count_a_truncated_results_file(reference, tmp_path):
    """What export, report and verify refuse (a results file cut short) is no finished shard for status."""
    out = shutil.copytree(reference[2], tmp_path / "run")
    _truncate(out / "results" / "part-00000.parquet")
    got = cli("status", str(out))
    assert got.returncode == 0, got.stderr[-2000:]
    status = json.loads(got.stdout)
    kept = pq.read_table(out / "results" / "part-00001.parquet").to_pylist()
    assert (status["shards_done"], status["shards_total"], status["rows"]) == (1, 2, len(kept))
    assert sum(status["status_counts"].values()) == len(kept)
    assert (
        list(status["damaged_shards"]) == ["00000"]
        and "not a readable Parquet file" in status["damaged_shards"]["00000"]
    )
    assert "warning: shard 00000 is not counted" in got.stderr and "relaunch the scan" in got.stderr
    assert status["phase"] == "write" and status["progress"]["write"]["shards_done"] == 1
    frame = cli("status", str(out), "--watch", "--iterations", "1")
    assert "write       1/2 shards written" in frame.stdout and "damaged     shard 00000" in frame.stdout
    refused = cli("export", str(out), "--out", str(tmp_path / "x.jsonl"))
    assert refused.returncode == 2 and "part-00000.parquet is damaged" in refused.stderr


def test_the_progress_bar_ends_with_the_runs_own_totals(reference):
    """The bar follows the screen (no verdict yet); once the scan returns it shows the run's totals."""
    bar = (reference[2].parent / "scan.stderr").read_text().replace("\r", "\n").splitlines()
    last = [line for line in bar if line.startswith("scan:") and "memorized=" in line]
    assert last, bar[-5:]
    figures = dict(re.findall(r"(\w+)=([\d.]+)", last[-1]))
    rows = pq.read_table(reference[2] / "results").to_pylist()
    assert int(figures["memorized"]) == sum(r["status"] == "memorized" for r in rows) > 0
    assert int(figures["spans"]) == len(rows)


def test_documents_sharing_an_id_keep_their_own_rows_and_evidence(reference, tiny_dir, tmp_path):
    """--allow-duplicate-ids: both documents fully present, the evidence on the one that holds the text."""
    _, want, _ = reference
    corpus = write_corpus(tmp_path / "dup.parquet", ids=("same", "same"))
    out = tmp_path / "run"
    done = cli(
        "scan",
        str(corpus),
        "--model",
        str(tiny_dir),
        "--out",
        str(out),
        *SCAN,
        "--docs-per-shard",
        "8",
        "--allow-duplicate-ids",
    )
    assert done.returncode == 0, done.stderr
    rows = pq.read_table(out / "results").to_pylist()
    assert len(rows) == len(want) and len({r["span_id"] for r in rows}) == len(rows)
    texts = pq.read_table(corpus).column("text").to_pylist()
    for row in rows:
        assert row["doc_id"] == "same"
        assert (
            row["text"] == texts[int(row["doc_row"].rsplit(":", 1)[1])][row["char_start"] : row["char_end"]]
        )
    flagged = [r for r in rows if r["memorized"]]
    assert flagged and all(r["doc_row"] == "dup.parquet:0" and r["text"] in texts[0] for r in flagged)
    assert {r["doc_row"] for r in rows} == {"dup.parquet:0", "dup.parquet:1"}
    evidence = tmp_path / "flagged.jsonl"
    assert cli("export", str(out), "--out", str(evidence)).returncode == 0
    assert len(evidence.read_text().splitlines()) == len(flagged)
    verified = cli("verify", str(out))
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_readers_refuse_what_is_not_a_run_and_warn_on_an_unfinished_one(reference, tmp_path):
    missing = tmp_path / "nothing"
    for command in (
        ["export", str(missing), "--out", str(tmp_path / "x.jsonl")],
        ["report", str(missing), "--out", str(tmp_path / "x.html")],
        ["verify", str(missing)],
        ["status", str(missing)],
    ):
        got = cli(*command)
        assert got.returncode == 2 and "is not a run directory" in got.stderr, (command, got.stderr[-2000:])
    assert not (tmp_path / "x.jsonl").exists() and not missing.exists()
    out = shutil.copytree(reference[2], tmp_path / "run")
    (out / "done" / "00001").unlink()  # as if the scan had been stopped before its second shard
    got = cli("export", str(out), "--out", str(tmp_path / "partial.jsonl"))
    assert got.returncode == 0 and "unfinished: 1 of 2 shards done" in got.stderr
    _garble(out / "results" / "part-00000.parquet", "PAR1 not parquet PAR1")
    damaged = cli("export", str(out), "--out", str(tmp_path / "d.jsonl"))
    assert damaged.returncode == 2 and "part-00000.parquet is damaged" in damaged.stderr
    assert "relaunch the scan" in damaged.stderr


def test_csv_cells_that_a_spreadsheet_would_run_are_defused(reference, tmp_path):
    import csv

    run = reference[2]
    assert cli("export", str(run), "--all", "--out", str(tmp_path / "all.csv")).returncode == 0
    with open(tmp_path / "all.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert {r["doc_id"] for r in rows} == {"'" + i for i in IDS}
    cells = [v for r in rows for v in r.values() if v]

    def number(v: str) -> bool:
        try:
            return math.isfinite(float(v))
        except ValueError:
            return False

    assert not any(v[0] in "=+-@\t\r" and not number(v) for v in cells), "no cell starts a formula"
    assert "'-inf" in cells or not any(v.endswith("inf") for v in cells), "-inf is not a formula either"
    assert any(float(r["acr"] or 0) > 1 for r in rows), "numbers stay numbers"
    exact = tmp_path / "all.jsonl"
    assert cli("export", str(run), "--all", "--out", str(exact)).returncode == 0
    assert {json.loads(line)["doc_id"] for line in exact.read_text().splitlines()} == set(IDS), (
        "JSONL is exact"
    )


def test_an_empty_out_is_refused_and_nothing_is_written(reference, tiny_dir, tmp_path):
    got = cli("scan", str(reference[0]), "--model", str(tiny_dir), "--out", "", *SCAN, cwd=tmp_path)
    assert got.returncode == 2 and "run directory path is empty" in got.stderr
    assert list(tmp_path.iterdir()) == []


def _started(out: Path, proc, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not (out / "provenance.json").exists():  # written once the model has loaded
        assert proc.poll() is None and time.monotonic() < deadline, "the scan never started"
        time.sleep(0.05)


def test_ctrl_c_exits_130_saying_how_to_resume_and_a_second_scan_is_locked_out(reference, tiny_dir, tmp_path):
    """The reference documents plus salad ones (same file name, so the same span ids): the scan is
    frozen mid-run (SIGSTOP) while a second one is refused, then interrupted with Ctrl-C (SIGINT)."""
    _, want, _ = reference
    corpus = write_corpus(tmp_path / "corpus.parquet", salad_docs=8)
    out = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "scanner",
        "scan",
        str(corpus),
        "--model",
        str(tiny_dir),
        "--out",
        str(out),
        *SCAN,
    ]
    # Ctrl-C as from a terminal, whatever the runner's own SIGINT (a runner started with & ignores it)
    proc = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    _started(out, proc)
    proc.send_signal(signal.SIGSTOP)
    assert len(list((out / "done").iterdir())) < 10, "frozen before the end"
    second = cli("scan", str(corpus), "--model", str(tiny_dir), "--out", str(out), *SCAN)
    assert second.returncode == 2 and f"in use by acr-scan pid {proc.pid}" in second.stderr, second.stderr[
        -2000:
    ]
    proc.send_signal(signal.SIGINT)
    proc.send_signal(signal.SIGCONT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr[-3000:]
    assert "relaunch the same command to resume" in stderr and "Traceback" not in stderr
    again = cli("scan", str(corpus), "--model", str(tiny_dir), "--out", str(out), *SCAN)
    assert again.returncode == 0, again.stderr[-3000:]
    rows = comparable(out)
    assert [r for r in rows if r["doc_row"] in ("corpus.parquet:0", "corpus.parquet:1")] == want
    assert len({r["doc_row"] for r in rows}) == 10


NAMESPACE = """
set -e
mount -t tmpfs -o size={size} tmpfs {mnt}
{prepare}
set +e
"$@" > {mnt}/../first.out 2> {root}/first.err; echo $? > {root}/first.rc
set -e
{repair}
"$@" > /dev/null 2> {root}/second.err; echo $? > {root}/second.rc
cp -r {mnt}/run {root}/copied
"""


def _in_namespace(root: Path, prepare: str, repair: str, command: list[str], size: str = "4m"):
    """Run the command twice in a private mount namespace on a small tmpfs: once after `prepare`, once
    after `repair`; the run directory is copied out for comparison."""
    mnt = root / "mnt"
    mnt.mkdir()
    script = NAMESPACE.format(size=size, mnt=mnt, root=root, prepare=prepare, repair=repair)
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", script, "sh", *command], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    read = lambda name: (root / name).read_text()  # noqa: E731
    return int(read("first.rc")), read("first.err"), int(read("second.rc")), read("second.err")


@pytest.mark.parametrize(
    "fault, prepare, repair, says",
    [
        (
            "full-disk",
            "head -c 4190000 /dev/zero > {mnt}/filler || true",
            "rm {mnt}/filler",
            ("No space left on device", "relaunch the same command"),
        ),
        # A finished run on a disk turned read-only: the relaunch must say so, not crash, and resume once writable.
        (
            "read-only",
            "cp -r {ref} {mnt}/run && mount -o remount,ro {mnt}",
            "mount -o remount,rw {mnt}",
            ("Read-only file system",),
        ),
    ],
    ids=["full-disk", "read-only"],
)
def test_a_full_or_read_only_disk_exits_2_and_the_run_resumes(
    fault, prepare, repair, says, reference, tiny_dir, tmp_path
):
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.fail("this test needs root and unshare (util-linux) to mount a private tmpfs")
    corpus, want, finished = reference
    mnt = tmp_path / "mnt"
    command = [
        sys.executable,
        "-m",
        "scanner",
        "scan",
        str(corpus),
        "--model",
        str(tiny_dir),
        "--out",
        str(mnt / "run"),
        *SCAN,
    ]
    rc, err, rc2, err2 = _in_namespace(
        tmp_path, prepare.format(mnt=mnt, ref=finished), repair.format(mnt=mnt), command
    )
    assert rc == 2, err[-3000:]
    assert all(text in err for text in says) and "Traceback" not in err, err[-3000:]
    assert rc2 == 0, err2[-3000:]
    assert comparable(tmp_path / "copied") == want
