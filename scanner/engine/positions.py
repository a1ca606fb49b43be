"""A model's context length read from its files, before any weights load.

A scan whose spans cannot fit the model's context used to screen past it and end with every
candidate `failed` and exit 0; refusing it up front needs the length before a run directory exists
(a corrected command would otherwise be refused as a changed configuration).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from scanner.errors import require

CONFIG_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")


def _from_config(config: dict) -> int | None:
    for source in (config, config.get("text_config") or {}):
        for key in CONFIG_KEYS:
            if isinstance(source.get(key), int) and source[key] > 0:
                return source[key]
    return None


def _from_gguf(path: Path) -> int | None:
    from gguf import GGUFReader

    reader = GGUFReader(str(path))
    arch = reader.fields.get("general.architecture")
    if arch is None:
        return None
    field = reader.fields.get(f"{bytes(arch.parts[arch.data[0]]).decode()}.context_length")
    return int(field.parts[field.data[0]][0]) if field is not None else None


def declared_positions(model: str) -> int | None:
    """The context length a local model declares; None for a hub id or when it cannot be read here
    (the loader reports unreadable files)."""
    path = Path(model)
    try:
        if path.is_file() and path.suffix.lower() == ".gguf":
            return _from_gguf(path)
        if (path / "config.json").is_file():
            return _from_config(json.loads((path / "config.json").read_text(encoding="utf-8")))
    except Exception:  # a damaged file is the loader's to report, with its own message
        return None
    return None


def check_span_fits(span_tokens: int, context_tokens: int, tau: float, positions: int | None) -> None:
    """The screen reads context + span; the search must at least try the decisive prompt length
    ceil(|y|/τ) - 1 before the span. One position is left for BOS."""
    if positions is None:
        return
    needed = span_tokens + max(context_tokens, math.ceil(span_tokens / tau) - 1) + 1
    # The largest span s with s + max(context, ceil(s/τ) - 1) + 1 <= positions.
    fits = max((s for s in range(1, positions) if s + max(context_tokens, math.ceil(s / tau) - 1) + 1
                <= positions), default=0)
    require(needed <= positions, f"--span-tokens {span_tokens} does not fit the model's context of "
            f"{positions} positions: the screen reads --context-tokens {context_tokens} before each span "
            f"and the search needs a prompt of up to {math.ceil(span_tokens / tau) - 1} tokens, {needed} "
            f"positions in all; pass --span-tokens {fits} or less" + (" (or fewer --context-tokens)"
                                                                      if context_tokens > fits else ""))
