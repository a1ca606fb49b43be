"""Write the tiny HF Llama (and its byte-level BPE tokenizer) as an F32 GGUF file, llama.cpp-style.

Only what the tests need: the layout llama.cpp's converter gives a Llama checkpoint, so that
transformers' GGUF loader (which undoes that layout) gives back the very same model and tokenizer.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

# HF parameter name inside a decoder layer -> llama.cpp's name inside `blk.N`.
LAYER_TENSORS = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
}
GLOBAL_TENSORS = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}


def permute_rotary(weight: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's q/k row order: HF rotates the two halves of a head, GGML interleaved pairs.

    Rows of a head go from (half, pair) order to (pair, half) order; transformers'
    `LlamaTensorProcessor._reverse_permute_weights` swaps them back.
    """
    half = weight.shape[0] // heads // 2
    return weight.reshape(heads, 2, half, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def gguf_name(hf_name: str) -> str:
    """The GGUF name of one HF state-dict key (`model.layers.3.mlp.up_proj.weight` -> `blk.3.ffn_up.weight`)."""
    stem, suffix = hf_name.rsplit(".", 1)
    if stem in GLOBAL_TENSORS:
        return f"{GLOBAL_TENSORS[stem]}.{suffix}"
    _, _, layer, inner = stem.split(".", 3)  # model.layers.N.<inner>
    return f"blk.{layer}.{LAYER_TENSORS[inner]}.{suffix}"


def gguf_tensors(model) -> dict[str, np.ndarray]:
    """Every weight as float32 numpy, renamed, with q and k permuted as llama.cpp stores them."""
    config = model.config
    heads = {"attn_q": config.num_attention_heads, "attn_k": config.num_key_value_heads}
    out = {}
    for hf_name, tensor in model.state_dict().items():
        name = gguf_name(hf_name)
        array = tensor.detach().float().cpu().numpy()
        kind = name.split(".")[-2]
        out[name] = permute_rotary(array, heads[kind]) if kind in heads else array
    return out


def add_model_metadata(writer, config) -> None:
    """The `llama.*` keys transformers maps back onto LlamaConfig (see its GGUF_CONFIG_MAPPING)."""
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    rope = getattr(config, "rope_parameters", None) or {}
    writer.add_name("tiny-llama")  # never "mistral": transformers would switch the architecture
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(float(rope.get("rope_theta", getattr(config, "rope_theta", 10000.0))))
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_vocab_size(config.vocab_size)
    writer.add_file_type(0)  # 0 = ALL_F32


def token_types(tokens: list[str], special_ids: set[int]) -> list[int]:
    """CONTROL for the special tokens (so transformers keeps them whole), NORMAL for the rest."""
    from gguf import TokenType

    return [int(TokenType.CONTROL if i in special_ids else TokenType.NORMAL) for i in range(len(tokens))]


def add_tokenizer_metadata(writer, hf_dir: Path, vocab_size: int) -> None:
    """A byte-level BPE as llama.cpp's "gpt2" tokenizer: tokens in id order, merges, special ids."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(hf_dir)
    model = json.loads((hf_dir / "tokenizer.json").read_text())["model"]
    by_id = {index: token for token, index in tokenizer.get_vocab().items()}
    # The model's rows can outnumber the tokenizer's; llama.cpp pads with placeholder tokens.
    tokens = [by_id.get(i, f"[PAD{i}]") for i in range(vocab_size)]
    # tokenizers >= 0.20 stores a merge as a pair, older versions as "a b"; GGUF wants "a b".
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")  # no llama.cpp split regex: plain GPT-2 byte-level
    writer.add_token_list(tokens)
    writer.add_token_types(token_types(tokens, set(tokenizer.all_special_ids)))
    writer.add_token_merges(merges)
    writer.add_bos_token_id(tokenizer.bos_token_id)
    writer.add_eos_token_id(tokenizer.eos_token_id)
    writer.add_pad_token_id(tokenizer.pad_token_id)
    writer.add_add_bos_token(tokenizer("a").input_ids[:1] == [tokenizer.bos_token_id])
    writer.add_add_eos_token(False)
    if tokenizer.chat_template:
        writer.add_chat_template(tokenizer.chat_template)


def write_gguf(hf_dir: Path, out_path: Path) -> Path:
    """Convert the HF directory's Llama and tokenizer to one F32 GGUF file at `out_path`."""
    import gguf
    import torch
    from transformers import AutoModelForCausalLM

    hf_dir, out_path = Path(hf_dir), Path(out_path)
    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
    writer = gguf.GGUFWriter(str(out_path), arch=gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.LLAMA])
    add_model_metadata(writer, model.config)
    add_tokenizer_metadata(writer, hf_dir, model.config.vocab_size)
    for name, array in gguf_tensors(model).items():
        writer.add_tensor(name, array)
    # GGUF's fixed order: header, key-values, then tensor infos and data (write_tensors_to_file does both).
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out_path
