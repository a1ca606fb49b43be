"""`acr-scan compare RUN --model B` through the CLI on the tiny model: B equal to A keeps every
flagged span memorized at the cost of one verification each (A's prompt checked on B), a random-weight
B of A's tokenizer flags nothing, a B of another tokenizer is refused before any work, a relaunch
resumes, and the report and export carry both sides.

One document (doc-0, its canary settled by certificates, one span searched: --max-candidates 1) keeps
run A to seconds; the controls are the spans A searched and found not memorized."""

import json
import shutil

import pyarrow.parquet as pq
import pytest
from clirun import cli

from scanner.cli.demo import demo_corpus
from scanner.measures.compare import verdict_class

SCAN = [
    "--span-tokens",
    "12",
    "--stride",
    "6",
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
    "--max-candidates",
    "1",
    "--calibration-prompts",
    "0",
    "--extend-tokens",
    "0",
]


def rows(folder):
    return pq.read_table(folder / "compare.parquet").to_pylist()


@pytest.fixture(scope="module")
def run_a(tiny_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("compare")
    corpus = root / "doc-0.parquet"
    pq.write_table(pq.read_table(demo_corpus(root / "demo.parquet")).slice(0, 1), corpus)
    done = cli("scan", str(corpus), "--model", str(tiny_dir), "--out", str(root / "a"), *SCAN)
    assert done.returncode == 0, done.stderr
    results = pq.read_table(root / "a" / "results").to_pylist()
    assert any(r["status"] == "memorized" for r in results)
    return root, results


@pytest.fixture(scope="module")
def same(run_a, tiny_dir):
    root, _ = run_a
    done = cli(
        "compare", str(root / "a"), "--model", str(tiny_dir), "--out", str(root / "same"), "--unit-size", "2"
    )
    assert done.returncode == 0, done.stderr
    return root / "same", done.stdout


def test_b_equal_to_a_keeps_every_flagged_span_at_one_verification_each(run_a, same, engine):
    _, results = run_a
    folder, stdout = same
    got = {r["span_id"]: r for r in rows(folder)}
    flagged = [r for r in results if r["status"] == "memorized"]
    controls = [r for r in results if r["status"] == "not_memorized"]
    assert set(got) == {r["span_id"] for r in flagged + controls}
    one_check = engine.forwards
    engine.verify(flagged[0]["prompt"], list(flagged[0]["target_ids"]))
    one_check = engine.forwards - one_check  # what generating from one prompt costs, measured
    for row in flagged:
        r = got[row["span_id"]]
        assert r["verdict_class"] == "still_memorized" and r["b_memorized"]
        assert r["a_prompt"] == row["prompt"] and r["a_acr"] == row["acr"]
        assert r["b_acr"] >= r["a_acr"]
        attempts = json.loads(r["warm_attempts"])
        assert [(a["warm"], a["steps"], a["outcome"]) for a in attempts] == [("previous", 0, "success")]
        assert r["warm_from_a"] and r["warm_steps"] == 0 and r["warm_forwards"] == one_check
        assert r["cold_forwards"] > 10 * one_check  # the control searched
    for row in controls:
        assert got[row["span_id"]]["verdict_class"] == "not_memorized"
    summary = json.loads((folder / "compare_summary.json").read_text())
    assert summary["classes"]["still_memorized"] == len(flagged)
    assert summary["models"]["a"]["model"] == summary["models"]["b"]["model"]
    assert f"still_memorized {len(flagged)}" in stdout


def test_a_relaunch_resumes_and_recomputes_only_a_lost_unit(run_a, same, tiny_dir):
    root, _ = run_a
    folder, _ = same
    before = {r["span_id"]: r["verdict_class"] for r in rows(folder)}
    (folder / "compare" / "done" / "00000").unlink()  # unit 0 lost: a kill before its marker
    again = cli(
        "-v", "compare", str(root / "a"), "--model", str(tiny_dir), "--out", str(folder), "--unit-size", "2"
    )
    assert again.returncode == 0, again.stderr
    assert "1 of " in again.stderr and "compare units still to run" in again.stderr
    assert {r["span_id"]: r["verdict_class"] for r in rows(folder)} == before
    changed = cli(
        "compare", str(root / "a"), "--model", str(tiny_dir), "--out", str(folder), "--unit-size", "3"
    )
    assert changed.returncode == 2 and "unit_size" in changed.stderr


def test_the_report_and_the_export_carry_both_sides_and_both_models(run_a, same, tmp_path):
    _, results = run_a
    folder, _ = same
    page = tmp_path / "compare.html"
    assert cli("report", str(folder), "--out", str(page)).returncode == 0
    html = page.read_text()
    assert "ACR on A against ACR on B" in html and html.count("<circle") == len(rows(folder))
    assert "still_memorized" in html and "<h4>B's prompt</h4>" in html
    exported = cli("export", str(folder), "--out", str(tmp_path / "pairs.csv"))
    assert exported.returncode == 0, exported.stderr
    models = json.loads((tmp_path / "pairs.csv.models.json").read_text())["models"]
    assert models["a"]["run"] == str((folder.parent / "a").resolve()) and models["b"]["tokenizer_hash"]
    assert cli("export", str(folder), "--bundle", str(tmp_path / "b")).returncode == 2


def random_model(tiny_dir, out, seed=1):
    """A model of the tiny model's shape and tokenizer with fresh random weights."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(seed)
    AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(tiny_dir)).save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (tiny_dir / name).is_file():
            shutil.copy(tiny_dir / name, out / name)
    return out


def test_a_random_b_of_the_same_tokenizer_flags_nothing(run_a, tiny_dir):
    root, results = run_a
    b = random_model(tiny_dir, root / "random")
    flagged = [r["span_id"] for r in results if r["status"] == "memorized"]
    picked = [flagged[0], flagged[-1], *[r["span_id"] for r in results if r["status"] == "not_memorized"][:1]]
    done = cli(
        "compare",
        str(root / "a"),
        "--model",
        str(b),
        "--out",
        str(root / "vs-random"),
        "--spans",
        ",".join(picked),
    )
    assert done.returncode == 0, done.stderr
    got = rows(root / "vs-random")
    assert [r["span_id"] for r in got] == picked and {r["selected_as"] for r in got} == {"listed"}
    assert not any(r["b_memorized"] or r["warm_memorized"] or r["cold_memorized"] for r in got)
    for r in got:
        expected = (
            "not_memorized"
            if r["a_status"] != "memorized"
            else ("completion_only" if r["b_completion"] else "forgotten")
        )
        assert r["verdict_class"] == expected
        if r["a_prompt"]:  # A's prompt was checked and refuted, then GCG started from it at its length
            attempts = json.loads(r["warm_attempts"])
            assert attempts[0]["warm"] == "previous" and attempts[0]["outcome"] == "failed"
            assert r["warm_from_a"] is False


def test_a_b_of_another_tokenizer_is_refused_before_any_work(run_a, tiny_dir):
    from scanner.studies.tiny import salad, train_tokenizer

    root, _ = run_a
    other = random_model(tiny_dir, root / "other-tokenizer")
    import random

    rng = random.Random(5)
    train_tokenizer([salad(rng, 30) for _ in range(50)], 512).save_pretrained(other)
    done = cli("compare", str(root / "a"), "--model", str(other), "--out", str(root / "refused"))
    assert done.returncode == 2
    assert "tokenizer is not run A's" in done.stderr and "tokens differ" in done.stderr
    assert not (root / "refused").exists()


@pytest.mark.parametrize(
    "a_mem,b_mem,a_comp,b_comp,expected",
    [
        (True, True, True, True, "still_memorized"),
        (True, True, True, False, "forgotten_by_completion_still_compressible"),
        (True, True, False, False, "still_memorized"),
        (True, False, True, False, "forgotten"),
        (True, False, True, True, "completion_only"),
        (False, True, False, False, "newly_memorized"),
        (False, False, True, True, "not_memorized"),
        (True, None, True, True, "failed"),
    ],
)
def test_verdict_classes(a_mem, b_mem, a_comp, b_comp, expected):
    assert verdict_class(a_mem, b_mem, a_comp, b_comp) == expected


ABSTAIN = "Do not quote any book.\n"


def test_b_behind_an_instruction_is_measured_under_it_and_the_identity_keeps_it(run_a, tiny_dir):
    """In-context unlearning: B is A behind a fixed instruction (compare --instruction, on B's side only)."""
    root, results = run_a
    flagged = next(r["span_id"] for r in results if r["status"] == "memorized")
    args = ["compare", str(root / "a"), "--model", str(tiny_dir), "--spans", flagged]
    done = cli(*args, "--out", str(root / "icu"), "--instruction", ABSTAIN)
    assert done.returncode == 0, done.stderr
    identity = json.loads((root / "icu" / "compare.json").read_text())
    assert identity["scan"]["prompt"]["instruction"] == ABSTAIN
    models = json.loads((root / "icu" / "compare_summary.json").read_text())["models"]
    assert (
        models["a"]["template"]["instruction"] is None and models["b"]["template"]["instruction"] == ABSTAIN
    )
    # Measured behind the instruction: B's window p_z is not A's (same weights, another opening).
    (row,) = rows(root / "icu")
    assert row["b_pz_topk"] != next(r for r in results if r["span_id"] == flagged)["pz_topk"]
    again = cli(*args, "--out", str(root / "icu"))  # the same comparison without the instruction: refused
    assert again.returncode == 2 and "scan" in again.stderr
    alone = cli(*args, "--out", str(root / "no-chat"), "--system-prompt", "Abstain.")
    assert alone.returncode == 2 and "--system-prompt needs --chat" in alone.stderr


def test_a_file_of_targets_chooses_the_spans_inside_them(run_a, tiny_dir, tmp_path):
    root, results = run_a
    flagged = next(r for r in results if r["status"] == "memorized")
    targets = tmp_path / "targets.jsonl"
    targets.write_text(json.dumps({"text": f"prefix {flagged['text']} suffix"}) + "\n")
    done = cli(
        "compare",
        str(root / "a"),
        "--model",
        str(tiny_dir),
        "--out",
        str(root / "file"),
        "--file",
        str(targets),
    )
    assert done.returncode == 0, done.stderr
    got = rows(root / "file")
    want = [r["span_id"] for r in results if r["text"] in f"prefix {flagged['text']} suffix"]
    assert [r["span_id"] for r in got] == want and flagged["span_id"] in want
    assert {r["selected_as"] for r in got} == {"listed"} and got[0]["verdict_class"] == "still_memorized"
    absent = tmp_path / "absent.txt"
    absent.write_text("no span of the run lies in this line\n")
    refused = cli(
        "compare",
        str(root / "a"),
        "--model",
        str(tiny_dir),
        "--out",
        str(root / "nofile"),
        "--file",
        str(absent),
    )
    assert (
        refused.returncode == 2 and "--file target 1" in refused.stderr and "holds no span" in refused.stderr
    )
