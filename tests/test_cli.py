"""The command line as a user runs it: a real subprocess, real exit codes."""

import json
import subprocess
import sys

import pytest

from scanner.studies.tiny import CANARIES

FAST = ["--steps", "60", "--candidates", "64", "--top-k", "64", "--restarts", "0"]


def run(*args, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "scanner", *args], capture_output=True, text=True, timeout=timeout
    )


def test_acr_json_has_the_documented_fields(tiny_dir):
    out = run("acr", "--model", str(tiny_dir), "--json", "--seed", "3", *FAST, CANARIES[3])
    assert out.returncode == 0, out.stderr
    record = json.loads(out.stdout.strip().splitlines()[-1])
    for key in (
        "target",
        "target_tokens",
        "prompt",
        "prompt_tokens",
        "acr",
        "memorized",
        "thresholds",
        "verified_generation",
        "teacher_forced",
        "min_margin",
        "schedule",
        "steps",
        "wall_s",
        "model",
        "seed",
        "bos",
        "trace",
        "generation_margin",
        "generation_margin_at",
        "fragile_below",
    ):
        assert key in record, key
    assert record["memorized"] and record["verified_generation"] and record["seed"] == 3
    assert record["thresholds"]["tau"] == {"tau": 1.0, "memorized": True}


def test_targets_sharing_forwards_are_reported_in_input_order(tiny_dir):
    out = run("acr", "--model", str(tiny_dir), "--json", "--targets-per-forward", "2", *FAST, *CANARIES[:3])
    assert out.returncode == 0, out.stderr
    records = [json.loads(line) for line in out.stdout.strip().splitlines()]
    assert [r["target"] for r in records] == list(CANARIES[:3])
    assert all(r["memorized"] and r["forwards"] > 0 for r in records)


def test_acr_table_and_file_input(tiny_dir, tmp_path):
    targets = tmp_path / "t.jsonl"
    targets.write_text(json.dumps({"text": CANARIES[1]}) + "\n")
    out = run("acr", "--model", str(tiny_dir), "--file", str(targets), *FAST)
    assert out.returncode == 0, out.stderr
    assert "ACR" in out.stdout and "1 targets: average ACR" in out.stdout
    assert "BOS id 1 prepended" in out.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--model", "/no/such/dir", "hello"], "--model /no/such/dir"),
        (["--model", "{tiny}", "   "], "target text is empty"),
        (["--model", "{tiny}", "caf\u00e9 au lait"], "--allow-non-ascii"),
        (["--model", "{tiny}", "word " * 400], "positions but the model has 256"),
        (["--model", "{tiny}", "--schedule", "slow", "hello"], "'slow' is not one of"),
        (["--model", "{tiny}"], "no target text"),
        (["--model", "{tiny}", "--targets-per-forward", "-1", "hi"], "--targets-per-forward -1 must be >= 0"),
    ],
)
def test_bad_input_exits_2_with_a_message_that_names_the_fix(tiny_dir, args, message):
    out = run("acr", *[a.replace("{tiny}", str(tiny_dir)) for a in args])
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert message in out.stderr


def test_a_bad_target_among_good_ones_fails_before_any_search(tiny_dir):
    out = run("acr", "--model", str(tiny_dir), "--json", *FAST, CANARIES[0], "caf\u00e9")
    assert out.returncode == 2 and "target 2" in out.stderr and out.stdout == ""


def test_demo_runs_the_embedded_default(tiny_dir):
    out = run("demo", "--workdir", str(tiny_dir), timeout=600)  # the session's tiny model is the demo's
    assert out.returncode == 0, out.stderr
    assert "canary: 4/4 memorized" in out.stdout
    assert "unseen text: 0/2 memorized" in out.stdout and "random string: 0/1 memorized" in out.stdout
    scan = tiny_dir / "demo-scan"
    assert "memorized spans with their prompts" in out.stdout and (scan / "report.html").is_file()
    pages = [p.read_text(encoding="utf-8") for p in (scan / "report-passages").glob("*.html")]
    assert pages and all("surrounding text is not shown" not in p for p in pages), "each in the corpus's text"
    flagged = [json.loads(line) for line in (scan / "flagged.jsonl").read_text().splitlines()]
    assert {r["doc_id"] for r in flagged} == {"doc-0", "doc-1", "doc-2", "doc-3"}


@pytest.mark.parametrize("engine", ["hf", "vllm"])
def test_a_wrong_model_path_is_named_before_any_engine_is_built(tmp_path, engine):
    from scanner.config import EngineConfig, ModelConfig, PromptConfig
    from scanner.engine.build import build_engines
    from scanner.errors import InputError

    empty = tmp_path / "model"
    empty.mkdir()
    with pytest.raises(InputError, match=r"--model .*model: the directory has no config.json"):
        build_engines(
            ModelConfig(model=str(empty)), PromptConfig(), EngineConfig(verify=engine, screen=engine)
        )


@pytest.mark.parametrize(
    "env, why",
    [
        ({"HF_HUB_OFFLINE": "1"}, "HF_HUB_OFFLINE is set"),
        ({"HF_ENDPOINT": "http://127.0.0.1:9"}, "cannot be reached"),
    ],
)
def test_a_hub_id_neither_cached_nor_reachable_is_refused_at_once_leaving_no_folder(tmp_path, env, why):
    """Offline, the hub client retried for a minute and a half with dozens of warnings, and a refused scan
    left its --out folder behind."""
    import os

    import pyarrow as pa
    import pyarrow.parquet as pq

    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), **env}
    env = {k: v for k, v in env.items() if k not in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")}
    corpus = tmp_path / "c.parquet"
    pq.write_table(pa.table({"id": ["d0"], "text": ["a document"]}), corpus)
    for command in (
        ["acr", "--model", "someone/some-model", "hello"],
        ["scan", "--model", "someone/some-model", "--out", str(tmp_path / "run"), str(corpus)],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "scanner", *command], capture_output=True, text=True, timeout=120, env=env
        )
        assert done.returncode == 2, done.stderr
        assert (
            "--model someone/some-model: not a local folder nor a .gguf file, not in the Hugging Face cache, and"
            in done.stderr
            and why in done.stderr
            and "--model DIR" in done.stderr
        )
        assert len(done.stderr.splitlines()) <= 2 and "Retrying" not in done.stderr
    assert not (tmp_path / "run").exists()
