"""Position limits per family: a context longer than the model's positions is capped (a log line, the
context recorded in the run's config and provenance), a span that cannot fit is refused; a sliding
window bounds the screen's chunk; a chat template that refuses a system role is an input error."""

import json
import random
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from clirun import cli
from transformers import Gemma2Config, LlamaConfig, MistralConfig, Qwen2Config

from scanner.config import PromptConfig, ScreenConfig
from scanner.engine.hf import _sliding_window
from scanner.engine.positions import fit_context
from scanner.engine.template import build_template
from scanner.errors import InputError
from scanner.stages.stream import chunk_limit, chunk_tokens
from scanner.studies.families import FAMILIES, base_bpe, bpe_texts, family_tokenizer
from scanner.studies.tiny import salad

SCAN = [
    "--span-tokens",
    "12",
    "--stride",
    "12",
    "--min-match-rate",
    "0.99",
    "--max-candidates",
    "0",
    "--calibration-prompts",
    "0",
]


def test_the_context_is_capped_and_a_span_that_cannot_fit_is_refused():
    assert fit_context(32, 32, 1.0, 1024) == 32  # GPT-2's 1,024 positions hold the defaults
    assert (
        fit_context(32, 2000, 1.0, 1024) == 1024 - 1 - 2 * 32
    )  # capped: BOS, and a stream that advances a span
    assert fit_context(100, 200, 1.0, 256) == 55
    assert fit_context(120, 200, 1.0, 256) == 15
    assert fit_context(32, 5000, 1.0, None) == 5000  # a hub id: nothing to cap against here
    assert fit_context(16, 8, 0.5, 64) == 8  # τ < 1 asks for longer prompts: 16 + 31 + 1 fits 64
    with pytest.raises(
        InputError, match="--span-tokens 200 does not fit .* 256 positions.*--span-tokens 128 or less"
    ):
        fit_context(200, 0, 1.0, 256)


def test_a_scan_asking_more_context_than_positions_runs_with_it_capped(tiny_dir, tmp_path):
    corpus = tmp_path / "c.parquet"
    pq.write_table(pa.table({"id": ["a"], "text": [salad(random.Random(3), 40)]}), corpus)
    done = cli(
        "scan",
        str(corpus),
        "--model",
        str(tiny_dir),
        "--out",
        str(tmp_path / "run"),
        *SCAN,
        "--context-tokens",
        "400",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "--context-tokens 400 capped to 231: the model has 256 positions" in done.stderr
    saved = json.loads((tmp_path / "run" / "run_config.json").read_text())
    assert saved["config"]["screen"]["context_tokens"] == 231
    window = json.loads(json.loads((tmp_path / "run" / "provenance.json").read_text())["screen_window"])
    assert window["context_tokens"] == 231 and window["positions"] == 256 and window["sliding_window"] is None
    again = cli(
        "scan",
        str(corpus),
        "--model",
        str(tiny_dir),
        "--out",
        str(tmp_path / "run"),
        *SCAN,
        "--context-tokens",
        "400",
    )  # the same command caps alike: a relaunch, not another config
    assert again.returncode == 0, again.stderr[-3000:]


def test_the_sliding_window_is_read_where_the_family_uses_one():
    shape = {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 32}
    window = lambda config: _sliding_window(SimpleNamespace(config=config))  # noqa: E731
    assert window(MistralConfig(**shape, sliding_window=4096)) == 4096
    assert window(Gemma2Config(**shape, sliding_window=512)) == 512
    assert (
        window(Qwen2Config(**shape, sliding_window=4096, use_sliding_window=False)) is None
    )  # Qwen2's default
    assert window(MistralConfig(**shape, sliding_window=None)) is None
    assert window(LlamaConfig(**shape)) is None


def _engine(positions, window, prefix=1):
    return SimpleNamespace(
        max_positions=positions, attention_window=window, template=SimpleNamespace(prefix_ids=(0,) * prefix)
    )


def test_the_chunk_keeps_inside_the_positions_and_a_window_that_can_hold_it():
    config = ScreenConfig()  # 1,024 tokens a chunk
    assert chunk_tokens(_engine(None, None), config, 64) == 1024
    assert chunk_limit(_engine(1024, None), 64) == (1024, "positions")
    assert chunk_tokens(_engine(1024, None), config, 64) == 1023  # GPT-2: its positions less the prefix
    assert chunk_limit(_engine(8192, 512), 64) == (512, "sliding window")  # Gemma 3's local layers
    assert chunk_tokens(_engine(8192, 512), config, 64) == 511
    # A window that cannot advance a chunk by its overlap is left to the positions (no cap below 2x).
    assert chunk_limit(_engine(256, 48), 64) == (256, "positions")


@pytest.fixture(scope="module")
def gemma_tokenizer():
    return family_tokenizer(FAMILIES["gemma2"], base_bpe(bpe_texts()))


def test_a_template_without_a_system_role_is_refused_naming_the_option(gemma_tokenizer):
    assert build_template(gemma_tokenizer, PromptConfig(chat=True)).prefix_text.startswith("<bos>")
    with pytest.raises(
        InputError, match="refused the messages .*drop --system-prompt, or put it in --instruction"
    ):
        build_template(gemma_tokenizer, PromptConfig(chat=True, system_prompt="You are a helpful assistant."))
