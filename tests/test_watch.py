"""`acr-scan status` and `status --watch` on real run directories of the tiny model, one per phase.

One scan (a canary document and salad ones, a shard each) is frozen (SIGSTOP) once some but not all
shards are screened and again once some but not all search units are done; each time its run directory
is copied, as a kill at that moment would leave it, and the scan goes on to the end. The certify, write
and passages states are copies of the finished run less what those phases had not committed yet (done
markers, later phases' plans, passages.parquet), as a kill during that phase leaves them. Each such copy
is then locked by this test's own process, as a live scan holds its run directory; the killed state is
the write state with the lock the real scan left behind (its pid gone)."""

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from cliopts import FINE_SPANS

from scanner.cli.demo import demo_corpus
from scanner.config import Budget, ScreenConfig
from scanner.stages.screen import cuts, rounds
from scanner.stages.spans import tokenize_document
from scanner.stages.stream import DocumentStream, stream_windows
from scanner.storage.lock import holder_of
from scanner.storage.status import _left_by_budget
from scanner.storage.store import Store
from scanner.studies.tiny import salad

SCAN = [*FINE_SPANS, "--docs-per-shard", "1"]
SALAD_DOCS = 9  # 10 shards: the screen takes long enough to be caught in the middle
OLD_KEYS = {
    "shards_done",
    "shards_total",
    "rows",
    "status_counts",
    "elapsed_s",
    "spans_per_s",
    "eta_s",
    "phases",
}


def cli(*args, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "scanner", *args], capture_output=True, text=True, timeout=timeout
    )


def corpus(root: Path) -> Path:
    demo = pq.read_table(demo_corpus(root / "demo.parquet")).slice(0, 1)  # doc-0 holds a canary
    rng = random.Random(3)
    ids = demo.column("id").to_pylist() + [f"salad-{i}" for i in range(SALAD_DOCS)]
    texts = demo.column("text").to_pylist() + [salad(rng, 20) for _ in range(SALAD_DOCS)]
    pq.write_table(pa.table({"id": ids, "text": texts}), root / "corpus.parquet")
    return root / "corpus.parquet"


def markers(run: Path, folder: str) -> list[Path]:
    where = run / folder
    return sorted(p for p in where.iterdir() if p.name.isdigit()) if where.is_dir() else []


def units(run: Path, plan: str) -> int | None:
    path = run / plan
    return len(json.loads(path.read_text())["units"]) if path.exists() else None


def freeze_when(proc, run: Path, ready, copy: Path, timeout: float = 300) -> None:
    """Stop the scan once `ready(run)`, copy its run directory (mtimes kept), let it go on."""
    deadline = time.monotonic() + timeout
    while not ready(run):
        assert proc.poll() is None and time.monotonic() < deadline, (
            "the scan ended before the state was reached"
        )
        time.sleep(0.01)
    proc.send_signal(signal.SIGSTOP)
    try:
        shutil.copytree(run, copy)
    finally:
        proc.send_signal(signal.SIGCONT)


def screening(run: Path) -> bool:
    return len(markers(run, "screen/done")) >= 1


def searching(run: Path) -> bool:
    return len(markers(run, "search/done")) >= 1


def without(done: Path, copy: Path, *, keep: dict[str, int], remove=()) -> Path:
    """The finished run less the done markers past the first `keep[folder]` and the `remove`d files."""
    shutil.copytree(done, copy)
    for folder, count in keep.items():
        for marker in markers(copy, folder)[count:]:
            marker.unlink()
    for name in remove:
        (copy / name).unlink()
    return copy


@pytest.fixture(scope="module")
def runs(tiny_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("watch")
    out = root / "run"
    command = [
        sys.executable,
        "-m",
        "scanner",
        "scan",
        str(corpus(root)),
        "--model",
        str(tiny_dir),
        "--out",
        str(out),
        *SCAN,
    ]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        freeze_when(proc, out, screening, root / "screen")
        freeze_when(proc, out, searching, root / "search")
        _, err = proc.communicate(timeout=600)
    finally:
        proc.kill()
    assert proc.returncode == 0, err[-3000:]
    states = {"screen": root / "screen", "search": root / "search", "complete": out}
    states["certify"] = without(
        out,
        root / "certify",
        keep={"certify/done": 2, "search/done": 0, "tighten/done": 0, "done": 0},
        remove=("search_plan.json", "tighten_plan.json", "passages.parquet"),
    )
    states["tighten"] = without(
        out, root / "tighten", keep={"tighten/done": 1, "done": 0}, remove=("passages.parquet",)
    )
    states["write"] = without(out, root / "write", keep={"done": 3}, remove=("passages.parquet",))
    states["passages"] = without(out, root / "passages", keep={}, remove=("passages.parquet",))
    states["killed"] = without(out, root / "killed", keep={"done": 3}, remove=("passages.parquet",))
    shutil.copy(root / "search" / "lock", states["killed"] / "lock")  # the scan's, which no longer runs
    for state in ("screen", "certify", "search", "tighten", "write", "passages"):
        (states[state] / "lock").write_text(json.dumps(holder_of(os.getpid())))  # held, as by a live scan
    return states


def status(run: Path) -> dict:
    out = cli("status", str(run))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def frame(run: Path) -> str:
    out = cli("status", str(run), "--watch", "--iterations", "1")
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_a_scan_stopped_in_its_screen(runs):
    run = runs["screen"]
    done = len(markers(run, "screen/done"))
    assert 1 <= done < 1 + SALAD_DOCS, "the screen was not caught in the middle; the test lost its point"
    tokens = sum(
        json.loads(p.read_text())["tokens"]
        for p in (run / "screen/stats").glob("*.json")
        if (run / "screen/done" / p.stem).exists()
    )
    got = status(run)
    assert set(got) >= OLD_KEYS | {"phase", "progress"} and got["phase"] == "screen"
    screen = got["progress"]["screen"]
    assert (screen["shards_done"], screen["shards_total"], screen["docs_done"]) == (done, 10, done)
    assert screen["tokens"] == tokens > 0 and screen["tokens_per_s"] > 0
    assert isinstance(got["eta_s"], float) and got["eta_s"] > 0 and got["eta_s"] == screen["eta_s"]
    assert got["elapsed_s"] > 0  # the screen parts' work time, though no result is written yet
    cost = got["cost"]
    assert cost["screen"]["parts"] == done and cost["screen"]["corpus_tokens"] == tokens
    assert (
        cost["certify"] is cost["search"] is cost["passages"] is cost["verification"] is None
    )  # not run yet
    shown = frame(run)
    assert (
        "phase: screen" in shown
        and f"screen      {done}/10 shards, {done}/10 documents, {tokens} tokens" in shown
    )
    assert "certify     waiting" in shown and "passages    waiting" in shown and "tokens/s" in shown
    assert re.search(r"ETA         (\d+ min )?\d+ s to the end of the screen", shown), shown


def test_a_scan_stopped_in_its_certificates(runs):
    run = runs["certify"]
    total = units(run, "certify_plan.json")
    settled = sum(
        json.loads((run / "certify/stats" / f"{p.name}.json").read_text())["settled"]
        for p in markers(run, "certify/done")
    )
    got = status(run)
    assert got["phase"] == "certify" and total > 2
    certify = got["progress"]["certify"]
    assert (certify["units_done"], certify["units_total"], certify["settled"]) == (2, total, settled)
    assert isinstance(got["eta_s"], float) and got["eta_s"] > 0
    shown = frame(run)
    assert "phase: certify" in shown and f"certify     2/{total} units, {settled} spans settled" in shown
    assert "screen      10/10 shards" in shown and "search      waiting" in shown
    assert re.search(r"ETA         \d+ s to the end of the certificates", shown), shown


def test_a_scan_stopped_in_its_search(runs):
    run = runs["search"]
    done, total = len(markers(run, "search/done")), units(run, "search_plan.json")
    assert 1 <= done < total, "the search was not caught in the middle; the test lost its point"
    stats = [
        json.loads((run / "search/stats" / f"{p.name}.json").read_text()) for p in markers(run, "search/done")
    ]
    got = status(run)
    assert got["phase"] == "search"
    search = got["progress"]["search"]
    assert (search["candidates_done"], search["candidates_total"]) == (done, total)  # one candidate a unit
    assert search["budget"] == {"kind": "steps", "spent": sum(s["steps"] for s in stats), "total": None}
    assert search["s_per_candidate"] == pytest.approx(sum(s["search_s"] for s in stats) / done)
    assert isinstance(got["eta_s"], float) and got["eta_s"] > 0 and search["ends"] == "plan"
    shown = frame(run)
    assert "phase: search" in shown and f"search      {done}/{total} candidates decided" in shown
    assert "s per candidate" in shown and "write       waiting" in shown and "tighten     waiting" in shown
    assert re.search(r"ETA         (\d+ min )?\d+ s to the end of the verdicts", shown), shown


def test_a_scan_stopped_while_it_shrinks_the_decided_prompts(runs):
    """Every candidate has its verdict before any prompt is shrunk: the search is complete, the tighten
    units run best bound first."""
    run = runs["tighten"]
    done, total = len(markers(run, "tighten/done")), units(run, "tighten_plan.json")
    assert done == 1 < total, "the run has fewer than 2 decided prompts to shrink; the test lost its point"
    got = status(run)
    assert got["phase"] == "tighten"
    search, tighten = got["progress"]["search"], got["progress"]["tighten"]
    assert search["candidates_done"] == search["candidates_total"] and search["over"]
    assert (tighten["candidates_done"], tighten["candidates_total"]) == (1, total)
    stats = json.loads((run / "tighten/stats/00000.json").read_text())
    assert tighten["budget"]["spent"] == search["budget"]["spent"] + stats["steps"]
    assert got["phases"]["tighten_units"] == {
        "done": 1,
        "cut": 0,
        "candidates_cut": 0,
        "searches_cut": 0,
        "total": total,
    }
    shown = frame(run)
    assert "phase: tighten" in shown and f"tighten     1/{total} decided prompts shrunk" in shown
    assert re.search(r"ETA         (\d+ min )?\d+ s to the end of the tightening", shown), shown
    plan = json.loads((run / "tighten_plan.json").read_text())["units"]
    decided = {r["span_id"]: r for r in Store(run, "search").rows()}
    bounds = [decided[span]["acr"] for unit in plan for _, span, _ in unit]
    assert bounds == sorted(bounds, reverse=True), "the best bound is shrunk first"
    assert all(
        decided[span]["acr_kind"] == "decision_bound" and prompt == decided[span]["prompt"]
        for unit in plan
        for _, span, prompt in unit
    )


def test_the_budget_ends_the_search_before_the_plan_when_it_pays_for_fewer_candidates():
    # 40 steps for 2 candidates: the 60 left pay for 3 more, fewer than the 10 planned.
    assert _left_by_budget(Budget("steps", 100), spent=40, mine=40, done=2, left=10) == 3
    assert (
        _left_by_budget(Budget("steps", 100), spent=40, mine=40, done=2, left=2) == 3
    )  # the plan ends first
    assert (
        _left_by_budget(Budget("steps", 100), spent=120, mine=120, done=2, left=10) == 0
    )  # spent: no unit starts
    assert _left_by_budget(Budget("seconds", 60), spent=0, mine=0, done=0, left=10) == 10  # nothing known yet
    # tightening after verdicts that spent 60: its own 10 steps for 2 candidates, 30 left, pay for 6
    assert _left_by_budget(Budget("steps", 100), spent=70, mine=10, done=2, left=10) == 6


def test_a_scan_stopped_writing_its_results(runs):
    got = status(runs["write"])
    assert got["phase"] == "write" and got["shards_done"] == 3
    write = got["progress"]["write"]
    assert (write["shards_done"], write["shards_total"]) == (3, 10) and got["eta_s"] > 0
    shown = frame(runs["write"])
    assert (
        "phase: write" in shown
        and "write       3/10 shards written" in shown
        and "passages    waiting" in shown
    )
    searched = units(runs["write"], "search_plan.json")
    assert f"search      {searched}/{searched} candidates decided" in shown


def test_a_scan_before_its_passages_and_a_complete_one(runs):
    got = status(runs["passages"])
    assert got["phase"] == "passages" and got["progress"]["passages"]["built"] is False
    shown = frame(runs["passages"])
    assert "phase: passages" in shown and "passages    not built yet" in shown
    assert "write       10/10 shards written" in shown
    done = status(runs["complete"])
    assert done["phase"] == "complete" and done["eta_s"] == 0 and done["shards_done"] == 10
    assert done["progress"]["passages"]["built"] is True
    # every unit committed removed its progress file: nothing runs
    assert done["running"] == [] and not list((runs["complete"] / "progress").glob("*.json"))


def documents(run: Path, engine) -> dict[str, list[int]]:
    texts = dict(
        zip(
            *pq.read_table(run.parent / "corpus.parquet", columns=["id", "text"]).to_pydict().values(),
            strict=True,
        )
    )
    return {doc: tokenize_document(text, engine.tokenizer)[0] for doc, text in texts.items()}


def streamed_chunks(ids: dict[str, list[int]], rows: list[dict], engine) -> list[tuple[int, int]]:
    """(tokens, scored positions) of every chunk the streamed windows of `rows` take: per document, the
    chunks of 255 positions (the tiny model's, less BOS) overlapping by context + span (16 + 12)."""
    prefix, out = len(engine.template.prefix_ids), []
    for doc in {r["doc_id"] for r in rows}:
        stream = DocumentStream(ids[doc], overlap=28, chunk=255)
        for k in stream.missing([(r["token_start"], r["token_end"]) for r in rows if r["doc_id"] == doc]):
            first, lo, hi = stream.reads(k)
            out.append((prefix + hi - first, hi - lo))
    return out


def certificate_rows(stream: DocumentStream, row: dict, engine) -> list[tuple[int, int]]:
    """(context j, span tokens) of each certificate row a followed span forwarded, by brute force: every j
    of the rounds up to the one that found its certificate, each through its window's first miss, then
    whole where it matched that far (stages/screen.py cuts)."""
    start, end, found = row["token_start"], row["token_end"], row["certificate_tokens"]
    limit = min(16, end - start - 1)  # no certificate as long as its span (ScreenConfig.certificate_limit)
    last = (
        min(limit, start)
        if found is None
        else min(start, next(hi for lo, hi in rounds(limit) if lo <= found <= hi))
    )
    ids = stream.ids
    window = stream_windows(engine, stream, [(start, end)], ScreenConfig(context_tokens=16))[0][0]
    cut = cuts(window)[0]
    out = []
    for j in range(1, last + 1):
        out.append((j, cut))
        if cut < end - start:
            seq = torch.tensor(
                [[*engine.template.prefix_ids, *ids[start - j : start], *ids[start : start + cut]]]
            )
            if (
                engine.logits(seq, keep=cut + 1)[0, :-1].argmax(-1) == torch.tensor(ids[start : start + cut])
            ).all():
                out.append((j, end - start))
    return out


def test_a_finished_scan_records_what_its_screen_forwarded(runs, engine):
    """The default screen: each document streamed in chunks (its windows and anchored spans read them),
    then, for the spans whose window reaches --certificate-min-match (their discoverable flag is set), a
    span row (template, span) and certificate rows of context lengths 1..11 (one short of the 12-token span)
    in rounds, up to the round that found the certificate, each cut at the window's first miss: the
    re-encoding factor of the corpus follows."""
    run = runs["complete"]
    screen = status(run)["cost"]["screen"]
    fixed = len(engine.template.prefix_ids) + len(engine.template.suffix_ids)
    rows = [r for r in Store(run, "screen").rows() if r["greedy_match_rate"] is not None]
    ids = documents(run, engine)
    chunks = streamed_chunks(ids, rows, engine)
    streams = {
        doc: DocumentStream(doc_ids, overlap=28, chunk=255) for doc, doc_ids in ids.items()
    }  # chunks once
    followed = [
        (r["target_tokens"], certificate_rows(streams[r["doc_id"]], r, engine))
        for r in rows
        if r["discoverable"] is not None
    ]
    assert 0 < len(followed) < len(rows)  # the canary's spans went on, the salad's did not
    assert any(n < t for t, c in followed for _, n in c), "no certificate row was cut: the count tests less"
    assert screen["screen_rows"] == len(chunks) + sum(1 + len(c) for _, c in followed)
    assert screen["forwarded_tokens"] == sum(n for n, _ in chunks) + sum(
        fixed + t + sum(fixed + j + n for j, n in c) for t, c in followed
    )
    assert screen["head_positions"] == sum(p for _, p in chunks) + sum(
        t + sum(n for _, n in c) for t, c in followed
    )
    assert screen["padded_tokens"] >= screen["forwarded_tokens"] >= screen["corpus_tokens"] > 0
    assert screen["reencoding"] == pytest.approx(screen["forwarded_tokens"] / screen["corpus_tokens"])
    assert screen["candidate_share"] == pytest.approx(screen["candidates"] / screen["spans"])
    assert screen["source"] == "measured in this run" and screen["seconds"] > 0


def test_a_finished_scan_records_its_search_by_outcome_and_stage(runs):
    run = runs["complete"]
    cost = status(run)["cost"]
    certify = [json.loads(p.read_text()) for p in (run / "certify/stats").glob("*.json")]
    settled = sum(s["settled"] for s in certify)
    assert cost["certify"]["settled"] == settled > 0
    assert cost["certify"]["settled_share"] == pytest.approx(settled / cost["screen"]["candidates"])
    rows, search = Store(run, "search").rows(), cost["search"]
    outcomes, stages = search["outcomes"], search["stages"]
    for key in ("steps", "forwards"):
        assert sum(o[key] for o in outcomes.values()) == sum(r[key] for r in rows) == search[key] > 0
        assert stages["deciding"][key] + stages["shrinking"][key] == search[key]
    assert sum(o["seconds"] for o in outcomes.values()) == pytest.approx(sum(r["search_s"] for r in rows))
    assert stages["deciding"]["seconds"] + stages["shrinking"]["seconds"] == pytest.approx(search["seconds"])
    assert sum(o["candidates"] for o in outcomes.values()) == len(rows) == search["candidates"]
    assert outcomes["memorized"]["candidates"] == sum(r["status"] == "memorized" for r in rows)
    assert outcomes["rejected_early"]["candidates"] == sum(bool(r["rejected_early"]) for r in rows)
    assert stages["deciding"]["candidates"] == len(rows) - outcomes["failed"]["candidates"]
    assert search["per_candidate"]["steps"] == pytest.approx(search["steps"] / len(rows))
    assert (
        0
        < cost["verification"]["seconds"]
        == pytest.approx(cost["verification"]["certify_s"] + cost["verification"]["search_s"])
    )
    shrunk, tighten = Store(run, "tighten").rows(), cost["tighten"]
    assert shrunk and tighten["stages"]["deciding"]["steps"] == tighten["stages"]["deciding"]["forwards"] == 0
    assert tighten["stages"]["shrinking"]["steps"] == sum(r["steps"] for r in shrunk) == tighten["steps"]
    assert stages["shrinking"]["steps"] == 0, "a search unit stops at the verdict"
    final = {r["span_id"]: r for r in pq.read_table(run / "results").to_pylist()}
    decided = {r["span_id"]: r for r in rows}
    for r in shrunk:  # the row's cost is both searches'
        assert final[r["span_id"]]["steps"] == decided[r["span_id"]]["steps"] + r["steps"]
        assert final[r["span_id"]]["acr_kind"] == "searched_min"
    calibrated = Store(run, "certify").rows() + rows + shrunk
    assert cost["calibration"]["seconds"] == pytest.approx(
        sum((r["calibration_s"] or 0) + (r["reference_s"] or 0) for r in calibrated)
    )
    assert cost["passages"]["passages"] == pq.read_table(run / "passages.parquet").num_rows
    assert status(runs["passages"])["cost"]["passages"] is None  # not built yet


def test_watch_of_a_complete_run_shows_one_frame_and_ends(runs):
    out = cli("status", str(runs["complete"]), "--watch", "--interval", "0.1")
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("phase: complete") == 1 and "ETA         finished" in out.stdout
    assert "passages    built" in out.stdout and re.search(
        r"results     \d+ spans \(memorized \d+", out.stdout
    )


def test_the_search_logs_one_line_per_candidate(runs):
    run = runs["complete"]
    for marker in markers(run, "search/done"):
        stats = json.loads((run / "search/stats" / f"{marker.name}.json").read_text())
        log = (run / "logs" / f"search-{marker.name}.log").read_text()
        lines = re.findall(
            r"INFO scanner\.run\.shard: span \w+: (memorized|not_memorized|failed)(, rejected early)?, "
            r"(prompt tokens \d+|no prompt found), steps \d+, [\d.]+ s",
            log,
        )
        assert len(lines) == stats["candidates"]
        starts = re.findall(r"span \w+ \(candidate (\d+)/(\d+), \d+ tokens\) starts, prompt cap \d+", log)
        assert [(int(i), int(n)) for i, n in starts] == [
            (i, stats["candidates"]) for i in range(1, len(lines) + 1)
        ]
        assert re.search(r"span \w+: length \d+ .* after \d+/\d+ steps, best right \d+/\d+", log), log
        assert sum(outcome == "memorized" for outcome, _, _ in lines) == stats["memorized"]


def test_ctrl_c_leaves_the_watch_with_exit_0(runs):
    # Ctrl-C as from a terminal, whatever the runner's own SIGINT (a runner started with & ignores it)
    proc = subprocess.Popen(
        [sys.executable, "-m", "scanner", "status", str(runs["search"]), "--watch", "--interval", "0.2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        first = proc.stdout.readline()  # the first frame is out: the command is inside its loop
        assert "phase: search" in first
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "stopped watching" in rest and "Traceback" not in err


def test_watch_waits_for_a_run_that_has_no_plan_yet_or_no_folder_yet(tmp_path):
    (tmp_path / "run").mkdir()  # made before its scan starts: no lock, no plan yet
    out = cli("status", str(tmp_path / "run"), "--watch", "--iterations", "2", "--interval", "0.1")
    assert out.returncode == 0 and out.stdout.count("phase: starting  (") == 2 and "shard plan" in out.stdout
    # started before the scan made its folder (a batch job's watcher): waits, then follows it
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "scanner",
            "status",
            str(tmp_path / "later"),
            "--watch",
            "--iterations",
            "40",
            "--interval",
            "0.25",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    first = proc.stdout.readline()  # its first frame, drawn before the folder exists
    (tmp_path / "later").mkdir()
    shown, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0 and "waiting for a scan to make it" in first and "phase: starting  (" in shown
    assert cli("status", str(tmp_path / "nope")).returncode == 2, (
        "without --watch a missing folder is refused"
    )
    (tmp_path / "file").write_text("not a run")
    for command in (["status", str(tmp_path / "file"), "--watch"], ["status", str(tmp_path / "file")]):
        refused = cli(*command)
        assert refused.returncode == 2 and "does not exist" not in refused.stderr, refused.stderr
        assert "not a run directory" in refused.stderr and "--out folder of" in refused.stderr
    bad = cli("status", str(tmp_path / "run"), "--watch", "--interval", "0")
    assert bad.returncode == 2 and "--interval 0.0 must be > 0" in bad.stderr


def test_a_killed_scan_says_nothing_runs_and_the_watch_ends(runs):
    """Its lock names the scan's pid, which is gone: the phase is where it stopped, with no ETA."""
    run = runs["killed"]
    got = status(run)
    assert got["phase"] == "write" and got["eta_s"] is None and got["shards_done"] == 3
    process = got["scan_process"]
    assert process["running"] is False and "no longer runs" in process["why"]
    assert process["lock"]["pid"] == json.loads((run / "lock").read_text())["pid"]
    assert status(runs["write"])["scan_process"]["running"] is True  # the same state, held by a live process
    out = cli("status", str(run), "--watch", "--interval", "0.1", timeout=60)  # ends by itself
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("phase: write, stopped: no scan is running") == 1
    assert "throughput  none: no scan is running" in out.stdout and "relaunch the scan command" in out.stdout
    assert not re.search(r"ETA +\d", out.stdout) and "write       3/10 shards written" in out.stdout
