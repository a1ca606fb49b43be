"""--search-budget auto, through the CLI on the tiny model: the search stops where the
yield of the last decided candidates along the rank falls below the rule, says why in the rows it leaves
and in the run; a relaunch stops at the same unit, a larger fixed budget goes on. The rule's math is
scanner/measures/budget.py auto_stop (its property tests beside it).

The corpus: a memorized canary whose spans rank first (no certificates, so they are searched), then word
salad the model never saw. Rule auto:1/2 in units of 1: two salad verdicts in a row stop it."""

import json
import random
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from clirun import cli
from hypothesis import given
from hypothesis import strategies as st

from scanner.measures import budget as bm
from scanner.schema import WALL_CLOCK
from scanner.studies.tiny import CANARIES, salad

SCAN = [
    "--span-tokens",
    "12",
    "--stride",
    "8",
    "--context-tokens",
    "16",
    "--min-match-rate",
    "0",
    "--certificate-max-tokens",
    "0",
    "--steps",
    "10",
    "--candidates",
    "64",
    "--top-k",
    "64",
    "--restarts",
    "0",
    "--calibration-prompts",
    "0",
    "--extend-tokens",
    "0",
    "--unit-size",
    "1",
]
AUTO = ["--search-budget", "auto:1/2"]
WHY = "yield of the last 2 searched candidates 0 of 2, below the auto threshold 1/2"
CANARY = CANARIES[2]  # every span of it memorized with these options


def corpus(path, words: int):
    texts = [CANARY, salad(random.Random(5), words)]
    pq.write_table(pa.table({"id": [f"d{i}" for i in range(len(texts))], "text": texts}), path)
    return path


def table(out) -> list[dict]:
    rows = [
        {k: v for k, v in r.items() if k not in WALL_CLOCK}
        for r in pq.read_table(out / "results").to_pylist()
    ]
    return sorted(rows, key=lambda r: r["span_id"])


def status(out) -> dict:
    """What `acr-scan status` prints, read in this process (each CLI start costs seconds)."""
    from scanner.storage.rundir import RunDir
    from scanner.storage.status import phase_counts, progress

    run = RunDir(out)
    return {**progress(run), "phases": phase_counts(run)}


@pytest.fixture(scope="module")
def stopped(tiny_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("auto")
    path = corpus(root / "stop.parquet", words=12)
    out = root / "run"
    done = cli("scan", str(path), "--model", str(tiny_dir), "--out", str(out), *SCAN, *AUTO)
    assert done.returncode == 0, done.stderr
    return path, out, table(out)


def test_auto_stops_when_the_yield_falls_and_says_why(stopped):
    _, out, rows = stopped
    decided = [r for r in rows if r["status"] in ("memorized", "not_memorized")]
    waiting = [r for r in rows if r["status"] == "not_searched"]
    canary = [r for r in rows if r["doc_id"] == "d0" and r["status"] != "screened_out"]
    assert canary and all(r["status"] == "memorized" for r in canary), "the memorized spans first, all found"
    missed = [r for r in decided if r["doc_id"] == "d1"]
    # The budget takes a run's windows in turns (measures/budget.py fresh_first): salad verdicts come
    # between the canary's, so more than two may be decided; it stops after the second in a row.
    assert len(missed) >= 2 and not any(r["memorized"] for r in missed), "salad verdicts, then it stops"
    assert waiting and all(r["doc_id"] == "d1" for r in waiting), "the rest of the salad is left"
    assert all(WHY in r["reason"] and "--search-budget auto:1/2" in r["reason"] for r in waiting)
    record = json.loads((out / "search_stop.json").read_text())
    assert record["memorized"] == 0 and record["window"] == 2 and record["verdicts"] == len(decided)
    assert record["candidates_left"] == len({r["searched_as"] or r["span_id"] for r in waiting})
    shown = status(out)
    assert shown["phase"] == "complete" and shown["phases"]["stopped"]["unit"] == record["unit"]
    assert shown["search"]["ends"] == "auto" and shown["search"]["stopped"]["why"] == WHY


def test_a_relaunch_after_a_kill_stops_at_the_same_unit_with_the_same_table(stopped, tiny_dir, tmp_path):
    """The relaunch searches the unit a kill lost again, stops where one run stopped, and nothing more
    (the table equals that run's: a unit more would leave fewer rows not_searched)."""
    path, out, rows = stopped
    killed = tmp_path / "killed"
    shutil.copytree(out, killed)
    last = max((killed / "search" / "done").iterdir())
    for marker in [last, *(killed / "done").iterdir()]:  # as if killed before the last unit committed
        marker.unlink()
    (killed / "search_stop.json").unlink()
    again = cli("scan", str(path), "--model", str(tiny_dir), "--out", str(killed), *SCAN, *AUTO)
    assert again.returncode == 0, again.stderr
    assert table(killed) == rows, "the relaunch searched the lost unit and stopped at the same place"
    assert json.loads((killed / "search_stop.json").read_text()) == json.loads(
        (out / "search_stop.json").read_text()
    )


def test_a_larger_fixed_budget_goes_on_after_an_auto_stop(stopped, tiny_dir, tmp_path):
    path, out, rows = stopped
    more = tmp_path / "more"
    shutil.copytree(out, more)
    spent = status(more)["phases"]["budget"]["spent"]
    budget = f"{int(spent) + 1}steps"  # one more unit starts, no other
    again = cli(
        "scan", str(path), "--model", str(tiny_dir), "--out", str(more), *SCAN, "--search-budget", budget
    )
    assert again.returncode == 0, again.stderr
    after = {r["span_id"]: r for r in table(more)}
    before = {r["span_id"]: r for r in rows}
    went_on = [
        s for s, r in after.items() if before[s]["status"] == "not_searched" and r["status"] != "not_searched"
    ]
    assert len(went_on) == 1, "the relaunch searched one more unit"
    assert all(
        r["reason"].startswith(
            f"not reached: the search budget (--search-budget {budget}) was spent before its turn"
        )
        for r in after.values()
        if r["status"] == "not_searched"
    )
    assert not (more / "search_stop.json").exists() and status(more)["phases"]["stopped"] is None


def test_auto_searches_everything_while_the_yield_holds(tiny_dir, tmp_path):
    """Two salad spans at the end of the rank: the window before the second still holds a memorized one."""
    path = corpus(tmp_path / "high.parquet", words=4)
    out = tmp_path / "run"
    done = cli("scan", str(path), "--model", str(tiny_dir), "--out", str(out), *SCAN, *AUTO)
    assert done.returncode == 0, done.stderr
    rows = table(out)
    salad_rows = [r for r in rows if r["doc_id"] == "d1" and r["status"] != "screened_out"]
    assert salad_rows and all(r["status"] == "not_memorized" for r in salad_rows), (
        "the salad at the end searched too"
    )
    assert not [r for r in rows if r["status"] == "not_searched"]
    assert not (out / "search_stop.json").exists()


@given(
    st.lists(st.lists(st.booleans(), min_size=1, max_size=4), max_size=12),
    st.integers(1, 3),
    st.integers(3, 9),
    st.integers(0, 12),
)
def test_the_stop_is_a_function_of_the_done_prefix(units, at_least, window, cut):
    """auto_stop stops at the first boundary whose last `window` verdicts hold fewer than `at_least`
    memorized; units done past a not-done one never move it, and a relaunch that knows the units before
    the stop stops at the same one."""
    rule = (min(at_least, window), window)
    stop = bm.auto_stop(units, rule)
    flat = []
    for index, verdicts in enumerate(units):
        last = flat[-window:]
        if len(last) == window and sum(last) < rule[0]:
            assert stop is not None and stop.unit == index and stop.memorized == sum(last)
            assert stop.verdicts == len(flat)
            break
        flat.extend(verdicts)
    else:
        assert stop is None
    gap = [u if i != cut else None for i, u in enumerate(units)]
    partial = bm.auto_stop(gap, rule)
    assert partial == (stop if stop is not None and stop.unit <= cut else None)


@pytest.mark.parametrize(
    "text, rule, ceiling",
    [
        ("auto", (1, 64), None),
        ("AUTO", (1, 64), None),
        ("auto:2h", (1, 64), bm.Budget("seconds", 7200)),
        ("auto:2/128", (2, 128), None),
        ("auto:1/8:500steps", (1, 8), bm.Budget("steps", 500)),
        ("20000steps", None, bm.Budget("steps", 20000)),
    ],
)
def test_auto_budgets_parse_with_their_rule_and_ceiling(text, rule, ceiling):
    assert bm.parse_auto(text) == rule and bm.parse_budget(text) == ceiling


@pytest.mark.parametrize(
    "text", ["auto:", "auto:0/4", "auto:5/4", "auto:2h:1/4", "auto:1/4:2h:3h", "autox", "auto:1/4:0s"]
)
def test_bad_auto_budgets_name_the_value(text):
    from scanner.errors import InputError

    with pytest.raises(InputError) as err:
        bm.parse_budget(text)
    assert repr(text) in str(err.value) and "auto" in str(err.value)
