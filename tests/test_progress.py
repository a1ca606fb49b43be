"""A search you can see, through the CLI: `status` and `--watch` look inside a running search unit (its
progress file in the run directory, its per-candidate lines in logs/), and `acr` shows its search on a
terminal (a pseudo-terminal here) but prints nothing of it to a pipe or with --json."""

import fcntl
import json
import os
import pty
import random
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from scanner.studies.tiny import salad

# Every span a candidate (--min-match-rate 0), searched with early rejection off and a budget no test
# waits for: the first unit is still on its first candidate when status looks.
SLOW_SCAN = [
    "--span-tokens",
    "12",
    "--stride",
    "12",
    "--min-match-rate",
    "0",
    "--no-early-reject",
    "--steps",
    "5000",
    "--candidates",
    "16",
    "--top-k",
    "16",
    "--restarts",
    "0",
    "--calibration-prompts",
    "0",
    "--unit-size",
    "8",
]
# A text the tiny model never saw: early rejection ends each length after a few GCG steps.
ACR = [
    "--steps",
    "20",
    "--candidates",
    "16",
    "--top-k",
    "16",
    "--restarts",
    "0",
    "--calibration-prompts",
    "0",
]
PROGRESS_LINE = re.compile(r"target 1/1: length \d+, step \d+/\d+, right \d+/\d+")
KEPT_LINE = re.compile(
    r"target 1/1: length \d+ (failed|rejected early \(\w+\)|found a prompt) after \d+/\d+ steps, "
    r"best right \d+/\d+"
)


def cli(*args, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "scanner", *args], capture_output=True, text=True, timeout=timeout
    )


def live_step(run: Path) -> dict | None:
    """The first unit's first live search, once it has taken a GCG step at a prompt length."""
    try:
        record = json.loads((run / "progress" / "search-00000.json").read_text())
    except (OSError, ValueError):
        return None
    live = record["live"]
    return live[0] if live and live[0]["length"] and live[0]["step"] >= 1 else None


def test_status_and_watch_see_inside_a_running_search_unit(tiny_dir, tmp_path):
    text = salad(random.Random(3), 12)
    pq.write_table(pa.table({"id": ["salad-0"], "text": [text]}), tmp_path / "corpus.parquet")
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "scanner",
            "scan",
            str(tmp_path / "corpus.parquet"),
            "--model",
            str(tiny_dir),
            "--out",
            str(run),
            *SLOW_SCAN,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 240
        while (live := live_step(run)) is None:
            assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "the search unit never reported a GCG step"
            time.sleep(0.05)
        proc.send_signal(signal.SIGSTOP)  # the unit stays mid-search, and its CPU is the readers'
        plan = json.loads((run / "search_plan.json").read_text())["units"]
        got = json.loads(cli("status", str(run)).stdout)
        shown = cli("status", str(run), "--watch", "--iterations", "1").stdout
        log = (run / "logs" / "search-00000.log").read_text()
    finally:
        proc.kill()
        proc.wait()
    assert got["phase"] == "search" and got["progress"]["search"]["units_done"] == 0
    (unit,) = got["running"]
    assert unit["unit"] == "search-00000" and unit["candidates_done"] == 0
    assert unit["candidates_total"] == len(plan[0]) >= 2
    (now,) = unit["live"]
    first = plan[0][0][1]
    assert now["candidate"] == 1 and now["span_id"] == first and now["target_tokens"] == 12
    assert now["step"] >= live["step"] >= 1 and now["steps"] == 5000 and 0 <= now["right"] <= 12
    assert now["length"] >= 1 and 0 <= unit["heartbeat_age_s"] < 20, unit
    assert re.search(
        rf"running     search-00000: 0/{len(plan[0])} candidates done; candidate 1 \(span {first}\): "
        rf"length \d+, step \d+/5000, right \d+/12, .*; heartbeat \d+ s ago",
        shown,
    ), shown
    # the unit's log: the candidate's start and each length tried (the empty prompt first) with its outcome
    assert re.search(
        rf"span {first} \(candidate 1/{len(plan[0])}, 12 tokens\) starts, prompt cap \d+", log
    ), log
    assert re.search(rf"span {first}: length 0 failed after 0/0 steps, best right \d+/12", log), log


def in_terminal(args: list[str], timeout: float = 120) -> tuple[int, str]:
    """Run the CLI with stdin, stdout and stderr on a pseudo-terminal; its exit code and all it wrote."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))  # rows, columns of a terminal
    proc = subprocess.Popen(
        [sys.executable, "-m", "scanner", *args], stdin=slave, stdout=slave, stderr=slave, close_fds=True
    )
    os.close(slave)
    chunks, deadline = [], time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if select.select([master], [], [], 0.2)[0]:
                try:
                    data = os.read(master, 65536)
                except OSError:  # the child closed the terminal (Linux: EIO)
                    break
                if not data:
                    break
                chunks.append(data)
            elif proc.poll() is not None:
                break
    finally:
        proc.kill()
        proc.wait()
        os.close(master)
    return proc.returncode, b"".join(chunks).decode("utf-8", "replace")


def test_acr_shows_its_search_on_a_terminal_and_nothing_in_a_pipe(tiny_dir):
    text = salad(random.Random(5), 10)
    args = ["acr", "--model", str(tiny_dir), *ACR, text]
    code, seen = in_terminal(args)
    assert code == 0, seen[-3000:]
    assert PROGRESS_LINE.search(seen), seen[-3000:]  # redrawn in place: length, step of its budget, right
    assert KEPT_LINE.search(seen), seen[-3000:]  # one kept per length tried, with its outcome
    assert re.search(r"\d+ targets?: average ACR", seen)  # the results' table follows the progress
    piped = cli(*args)
    assert piped.returncode == 0, piped.stderr
    assert "step" not in piped.stderr and "target 1/1" not in piped.stderr + piped.stdout
    assert re.search(r"\d+ targets?: average ACR", piped.stdout)
    code, as_json = in_terminal([*args, "--json"])
    assert code == 0 and not PROGRESS_LINE.search(as_json) and not KEPT_LINE.search(as_json)
    assert json.loads(as_json.strip().splitlines()[-1])["target"] == text  # stdout stays machine-readable


def test_the_heartbeat_beats_through_a_long_calibration_and_stops_with_the_unit(tmp_path):
    """The heartbeat is a timer: a unit in a stage that calls no observer for minutes (calibration of a
    real model, one span at a time) still beats, so the Ray driver never takes it for a hung worker;
    once the unit ends its file is gone and stays gone. Screen shards and passages beat alike."""
    from scanner.run.heartbeat import UnitProgress, task_beat
    from scanner.storage.progress import running

    def beats(path: Path, seconds: float) -> set[float]:
        seen, deadline = set(), time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                seen.add(json.loads(path.read_text())["heartbeat"])
            except (OSError, ValueError):  # between the rename and the read: the next look sees it
                pass
            time.sleep(0.01)
        return seen

    watcher = UnitProgress(tmp_path, "search-00000", ["a", "b"], every=0.05)
    watcher.stage("calibration", 0, 2)  # then nothing for a while, as a long calibration's first span
    path = tmp_path / "progress" / "search-00000.json"
    assert len(beats(path, 0.6)) >= 4, "the heartbeat stood still while the unit calibrated"
    (unit,) = running(tmp_path)
    assert unit["stage"] == {"name": "calibration", "done": 0, "total": 2} and unit["heartbeat_age_s"] < 1
    watcher.close()
    time.sleep(0.2)  # a beat after close would bring the file back
    assert not path.exists() and running(tmp_path) == []
    with task_beat(tmp_path, "screen-00003", every=0.05):
        assert len(beats(tmp_path / "progress" / "screen-00003.json", 0.4)) >= 3
    assert not (tmp_path / "progress" / "screen-00003.json").exists()


def test_a_given_up_task_is_added_to_the_record_and_a_damaged_record_is_made_again(tmp_path, caplog):
    from scanner.storage.progress import given_up, record_given_up

    event = {"task": "search-00003", "pid": 41, "silent_s": 7.2, "hung_after_s": 6, "time": 1.5}
    record_given_up(tmp_path, event)
    record_given_up(tmp_path, {**event, "task": "search-00004", "pid": None})
    assert given_up(tmp_path) == {"count": 2, "last": {**event, "task": "search-00004", "pid": None}}
    (tmp_path / "given_up.json").write_text('{"events": [{"task": 3}]}')
    assert given_up(tmp_path) == {"count": 0, "last": None}
    record_given_up(tmp_path, event)
    assert "given_up.json is not believed" in caplog.text and given_up(tmp_path) == {
        "count": 1,
        "last": event,
    }
