"""The fixed prefix cached once (engine/prefix.py) gives the losses, matches and gradients of recomputing
it in every forward, one target or several per forward; where it cannot hold it is not used."""

import pytest
import torch

from scanner.config import PromptConfig
from scanner.engine import batched, prefix
from scanner.engine.batched import TargetScorer
from scanner.engine.hf import HFEngine
from scanner.studies.tiny import CANARIES

CHAT = PromptConfig(chat=True, system_prompt="Be brief.", instruction="Quote:")


@pytest.fixture(scope="module")
def pair(loaded):
    """The tiny model inside a chat template (a prefix of many tokens), with the cache and without."""
    cached, recomputed = HFEngine(loaded, CHAT), HFEngine(loaded, CHAT)
    recomputed.cache_prefix = False
    return cached, recomputed


def _items(engine, lengths):
    gen = torch.Generator().manual_seed(0)
    pool = torch.tensor(engine.allowed_ids)
    return [
        (
            TargetScorer(engine, engine.encode_target(text), loss),
            pool[torch.randint(len(pool), (6 + i, n), generator=gen)],
        )
        for i, (text, n, loss) in enumerate(
            zip(CANARIES, lengths, ["ce", "margin", "wrong_ce"], strict=False)
        )
    ]


def test_the_chat_prefix_is_cached_and_a_lone_bos_is_not(pair, engine):
    cached, recomputed = pair
    assert len(cached.template.prefix_ids) > 5
    assert cached.prefix_cache().tokens == len(cached.template.prefix_ids) - 1  # the last one is always fed
    assert recomputed.prefix_cache() is None and engine.prefix_cache() is None  # BOS alone: not worth it


def test_scores_and_gradients_equal_the_recomputed_prefix(pair):
    cached, recomputed = pair
    for lengths in ([4], [2, 9, 5], [0]):  # one target alone, several per forward, the empty prompt
        a, b = _items(cached, lengths), _items(recomputed, lengths)
        assert all(s.cache is not None for s, _ in a) and all(s.cache is None for s, _ in b)
        with_cache = batched.scores(cached, a) if len(a) > 1 else [a[0][0].score(a[0][1])]
        without = batched.scores(recomputed, b) if len(b) > 1 else [b[0][0].score(b[0][1])]
        for x, y in zip(with_cache, without, strict=True):
            assert torch.allclose(x.loss, y.loss, atol=1e-5) and torch.equal(x.right, y.right)
        firsts = [[(s, c[0]) for s, c in items] for items in (a, b)]
        if lengths == [0]:  # the empty prompt: its first target token is predicted by the prefix's last
            continue
        grads = [
            batched.gradients(e, f) if len(f) > 1 else [f[0][0].gradient(f[0][1])]
            for e, f in zip(pair, firsts, strict=True)
        ]
        for (ga, la, ea), (gb, lb, eb) in zip(*grads, strict=True):
            finite = torch.isfinite(gb)
            assert torch.equal(finite, torch.isfinite(ga))
            assert torch.allclose(ga[finite], gb[finite], atol=1e-5, rtol=1e-4)
            assert la == pytest.approx(lb, abs=1e-5) and ea == eb


def test_sliding_window_models_recompute_the_prefix():
    from transformers import MistralConfig, MistralForCausalLM

    torch.manual_seed(0)
    model = MistralForCausalLM(
        MistralConfig(
            vocab_size=64,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
            sliding_window=16,
        )
    ).eval()
    assert "sliding-window" in prefix.why_not(model, [1, 2, 3, 4], 16, list(range(5, 40)))
    assert prefix.why_not(model, [1, 2, 3, 4], None, list(range(5, 40))) is None  # the check itself passes
