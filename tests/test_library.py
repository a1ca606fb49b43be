"""A library scan, through the CLI on the tiny model: a seconds budget that holds within a GCG
step and resumes where it was cut; a passage found once is given to its copies at other offsets; a
header every document holds is shared text, shown once and not counted as any book's finding."""

import json
import random
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from cliopts import salad_search
from clirun import cli

from scanner.studies.tiny import CANARIES, salad

# Slow candidates: word salad the model never saw, every span a candidate, no early rejection, so each
# search runs its whole schedule (0.4 to 0.6 s each on the tiny model, 13 searches in one unit).
SLOW = salad_search(10, 64)


# Seconds budgets near 3 s, tried in turn until the deadline falls inside a search: one that falls between
# two searches (one ended, the next not yet at its first GCG step) cuts none mid-search, which is right but not
# the case under test. The gaps take about a third of the time here, so four tries missed on a CI machine;
# twelve miss with odds under 1e-4 if the tries are independent.
BUDGETS = (3, 2.6, 3.4, 2.2, 3.8, 1.8, 2.9, 3.3, 2.45, 4.2, 1.6, 3.05)


def search_spent(out) -> float:
    return sum(json.loads(p.read_text())["search_s"] for p in (out / "search" / "stats").glob("*.json"))


def test_a_seconds_budget_stops_within_a_step_and_a_larger_one_resumes_the_cut_unit(tiny_dir, tmp_path):
    rng = random.Random(3)
    corpus = tmp_path / "slow.parquet"
    pq.write_table(
        pa.table({"id": [f"d{i}" for i in range(4)], "text": [salad(rng, 14) for _ in range(4)]}), corpus
    )
    for seconds in BUDGETS:
        out = tmp_path / f"run-{seconds}"
        done = cli(
            "scan",
            str(corpus),
            "--model",
            str(tiny_dir),
            "--out",
            str(out),
            *SLOW,
            "--search-budget",
            f"{seconds}s",
        )
        assert done.returncode == 0, done.stderr
        overshoot = search_spent(out) - seconds
        assert overshoot < 1.0, f"the budget was overshot by {overshoot:.1f} s, more than a step (~0.1 s)"
        rows = pq.read_table(out / "results").to_pylist()
        cut = [r for r in rows if r["status"] == "not_searched"]
        assert cut and all(f"--search-budget {seconds}s" in r["reason"] for r in cut)
        if any("during its search" in r["reason"] for r in cut):
            break
    assert any("during its search" in r["reason"] for r in cut), "the search running at the deadline says so"
    decided = {
        r["span_id"]: (r["status"], r["steps"], r["prompt"]) for r in rows if r["status"] != "not_searched"
    }

    again = cli(
        "scan", str(corpus), "--model", str(tiny_dir), "--out", str(out), *SLOW, "--search-budget", "9s"
    )
    assert again.returncode == 0, again.stderr
    after = {r["span_id"]: r for r in pq.read_table(out / "results").to_pylist()}
    assert all(
        (after[s]["status"], after[s]["steps"], after[s]["prompt"]) == v for s, v in decided.items()
    ), "the verdicts reached before the cut are kept, not searched again"
    assert sum(r["status"] != "not_searched" for r in after.values()) > len(decided), "the relaunch went on"
    assert search_spent(out) - 9.0 < 1.0


def test_a_relaunch_goes_on_with_the_search_the_budget_cut_where_it_stood(tiny_dir, tmp_path):
    """The cut search's record (the lengths refuted, the length searched, its steps and best prompt) is
    what the relaunch goes on from: no refuted length searched again, the cut try continued with the steps
    it had left, and the cut and the resumed run together spend what one search from scratch spends."""
    rng = random.Random(5)
    corpus = tmp_path / "slow.parquet"
    pq.write_table(pa.table({"id": ["d0", "d1"], "text": [salad(rng, 14) for _ in range(2)]}), corpus)
    for budget in (f"{seconds}s" for seconds in BUDGETS):
        out = tmp_path / f"run-{budget}"
        done = cli(
            "scan", str(corpus), "--model", str(tiny_dir), "--out", str(out), *SLOW, "--search-budget", budget
        )
        assert done.returncode == 0, done.stderr
        records = {
            span: c
            for p in (out / "search" / "stats").glob("*.json")
            for span, c in json.loads(p.read_text()).get("cut", {}).items()
        }
        going = {span: c for span, c in records.items() if c["forwards"] or c.get("resume")}
        assert len(going) <= 1, f"at most one search (width 1) runs at the deadline: {records}"
        if going:
            break
    assert len(going) == 1, f"one search (width 1) was running at the deadline: {records}"
    ((span, record),) = going.items()
    where = record["resume"]
    assert where["length"] is not None and 0 <= where["steps"] < 10
    assert where["refuted"] == [n for n, ok in where["tried"] if not ok]
    # status counts the cut unit apart, not as done (one unit of every candidate: --unit-size 64)
    shown = cli("status", str(out))
    assert shown.returncode == 0, shown.stderr
    shown = json.loads(shown.stdout)
    assert shown["phases"]["search_units"] == {
        "done": 0,
        "cut": 1,
        "candidates_cut": len(records),
        "searches_cut": 1,
        "total": 1,
    }
    search = shown["progress"]["search"]
    assert (search["units_done"], search["units_cut"], search["candidates_done"], search["searches_cut"]) == (
        0,
        1,
        search["candidates_total"] - len(records),
        1,
    )

    again = cli(
        "scan", str(corpus), "--model", str(tiny_dir), "--out", str(out), *SLOW, "--search-budget", "600s"
    )
    assert again.returncode == 0, again.stderr
    rows = {r["span_id"]: r for r in pq.read_table(out / "results").to_pylist()}
    row = rows[span]
    searched = [
        a for a in row["attempts"] if a["stage"] == "search" and a["warm"] not in ("certificate", "decided")
    ]
    assert not {a["length"] for a in searched} & set(where["refuted"]), "a refuted length was searched again"
    if where["prompt_ids"]:  # the cut try goes on from its best prompt with the steps it had left
        assert (searched[0]["length"], searched[0]["warm"], searched[0]["max_steps"]) == (
            where["length"],
            "resumed",
            10 - where["steps"],
        )
    cold = {
        r["steps"]
        for s, r in rows.items()  # every other search ran whole, from scratch
        if s != span and r["status"] == "not_memorized" and r["target_tokens"] == row["target_tokens"]
    }
    assert row["status"] == "not_memorized" and len(cold) == 1, (row["status"], cold)
    assert row["steps"] + record["steps"] == cold.pop(), (
        "the cut run and the relaunch spend one search's steps"
    )
    assert not any("cut" in json.loads(p.read_text()) for p in (out / "search" / "stats").glob("*.json"))


# A library in small: every document opens with the same header (a text the model memorized), and one
# other memorized passage stands in two documents at different offsets, so no window of one is a window
# of the other. Six documents: shared text by default is text held by at least 3.
CARDS = [
    "--span-tokens",
    "12",
    "--stride",
    "4",
    "--context-tokens",
    "16",
    "--min-match-rate",
    "0.8",
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
]
HEADER, PASSAGE = CANARIES[0], CANARIES[1]
# The passage after this many words of the document's own salad: 29 and 32 tokens into the documents,
# so no window of the one (every 4 tokens) cuts the passage where a window of the other does.
PLANTED = {"d0": 2, "d3": 3}


def document(i: int, rng: random.Random) -> str:
    own = salad(rng, 30)
    words = own.split(" ")
    at = PLANTED.get(f"d{i}")
    if at is not None:
        words.insert(at, PASSAGE)
    return f"{HEADER}\n" + " ".join(words)


@pytest.fixture(scope="module")
def library(tiny_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("library")
    rng = random.Random(8)
    corpus = root / "library.parquet"
    pq.write_table(
        pa.table({"id": [f"d{i}" for i in range(6)], "text": [document(i, rng) for i in range(6)]}), corpus
    )
    out = root / "run"
    done = cli("scan", str(corpus), "--model", str(tiny_dir), "--out", str(out), *CARDS)
    assert done.returncode == 0, done.stderr
    return out, pq.read_table(out / "results").to_pylist()


def test_a_passage_found_in_one_document_is_given_to_its_copies_at_other_offsets(library):
    out, rows = library
    ids = {r["span_id"]: r for r in rows}
    inside = [
        r
        for r in rows
        if r["status"] == "memorized"
        and r["text"].strip()
        and r["text"].strip() in PASSAGE
        and len(r["text"].strip()) > 20
    ]
    by_doc = {doc: [r for r in inside if r["doc_id"] == doc] for doc in PLANTED}
    assert all(by_doc.values()), "the passage is memorized in every document that holds it"
    texts = {doc: {r["text"] for r in found} for doc, found in by_doc.items()}
    assert texts["d0"] == texts["d3"], "every text memorized in one copy stands memorized in the other"
    given = [r for r in inside if r["searched_as"] and ids[r["searched_as"]]["doc_id"] != r["doc_id"]]
    assert given, "a copy at another offset took the verdict of the span searched"
    assert all(r["steps"] == 0 and r["copies_in_corpus"] == 2 for r in given)
    assert all(ids[r["searched_as"]]["text"] == r["text"] for r in given)


def test_a_header_every_document_holds_is_shared_text_shown_once_and_no_book_is_flagged_for_it(
    library, tmp_path
):
    out, rows = library
    passages = pq.read_table(out / "passages.parquet").to_pylist()
    shared = [p for p in passages if p["shared_text"]]
    assert shared and all(p["copies_in_corpus"] == 6 and p["text"].strip() in HEADER for p in shared)
    assert not any(p["shared_text"] for p in passages if PASSAGE[:20] in p["text"])
    report = tmp_path / "report.html"
    done = cli("report", str(out), "--out", str(report))
    assert done.returncode == 0, done.stderr
    page = report.read_text()
    assert page.count("text repeated in 6 documents") == 1
    table = page[page.index('<table class="documents">') :]
    table = table[: table.index("</table>")]
    assert set(re.findall(r'<td class="doc">([^<]*)</td>', table)) == set(PLANTED), "only the passage's books"
    spans = tmp_path / "spans.csv"
    assert cli("export", str(out), "--out", str(spans), "--without-shared-text").returncode == 0
    kept = json.loads((tmp_path / "spans.csv.denominators.json").read_text())
    assert kept["selection"]["shared_text_rows_left_out"] > 0
    left = [r for r in spans.read_text().splitlines()[1:] if HEADER[:15] in r]
    assert not left, "the header's spans are left out"


def test_the_bundle_and_the_denominators_say_how_shared_text_was_treated(library, tmp_path):
    out, rows = library
    treated = {}
    for name, extra in (("all", []), ("own", ["--without-shared-text"])):
        done = cli("export", str(out), "--bundle", str(tmp_path / name), *extra)
        assert done.returncode == 0, done.stderr
        treated[name] = json.loads((tmp_path / name / "denominators.json").read_text())["shared_text"]
        evidence = [
            json.loads(line) for line in (tmp_path / name / "evidence.jsonl").read_text().splitlines()
        ]
        assert len(evidence) == json.loads((tmp_path / name / "denominators.json").read_text())["rows"]
        treated[name]["rows"] = len(evidence)
        treated[name]["header_rows"] = sum(
            len(r["text"].strip()) > 10 and r["text"].strip() in HEADER for r in evidence
        )
    found = {"shared_text_min_docs": 3, "texts": 1, "documents": 6, "set_apart": True}  # half of 6 documents
    assert all(treated[name][k] == v for name in treated for k, v in found.items()), treated
    assert treated["all"]["spans"] == treated["own"]["spans"] > 0 and treated["all"]["passages"] >= 6
    assert (treated["all"]["left_out"], treated["all"]["rows_left_out"]) == (False, 0)
    assert (
        treated["own"]["left_out"]
        and treated["own"]["rows_left_out"] == treated["all"]["rows"] - treated["own"]["rows"]
    )
    assert treated["all"]["header_rows"] > 0 and treated["own"]["header_rows"] == 0, (
        "the header's spans are left out"
    )
    spans = tmp_path / "spans.jsonl"
    assert cli("export", str(out), "--out", str(spans), "--without-shared-text").returncode == 0
    sidecar = json.loads((tmp_path / "spans.jsonl.denominators.json").read_text())["shared_text"]
    assert (
        {k: sidecar[k] for k in found} == found
        and sidecar["left_out"]
        and sidecar["spans"] == treated["all"]["spans"]
    )
