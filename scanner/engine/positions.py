"""A model's context length read from its files, before any weights load.

A scan whose spans cannot fit the model's context would screen past it and end with every candidate
`failed` and exit 0, so the length is read before a run directory exists: a span that cannot fit
is refused there (a corrected command would otherwise be refused as a changed configuration), and a
context that cannot fit is capped there, so that the run's configuration records the context it used.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from scanner.errors import InputError

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


def fit_context(span_tokens: int, context_tokens: int, tau: float, positions: int | None) -> int:
    """The context tokens the screen can read before a span on a model of `positions`: context_tokens, or
    fewer where they would not fit (a model of 1,024 positions asked for more). The screen's stream
    re-reads context + span at each chunk's start and must advance by a span at least, so context
    + 2 spans + BOS fit. Context only adds evidence, so it is capped; the span and its decisive prompt
    length ceil(|y|/τ) - 1 are what ACR measures, so a span that cannot fit with them is refused."""
    if positions is None:
        return context_tokens
    decisive = math.ceil(span_tokens / tau) - 1
    if span_tokens + decisive + 1 <= positions:
        return min(context_tokens, max(0, positions - 1 - 2 * span_tokens))
    # The largest span s with s + ceil(s/τ) - 1 + 1 <= positions.
    fits = max((s for s in range(1, positions) if s + math.ceil(s / tau) <= positions), default=0)
    raise InputError(
        f"--span-tokens {span_tokens} does not fit the model's context of {positions} positions: "
        f"the search needs a prompt of up to {decisive} tokens before the span and a position for "
        f"BOS, {span_tokens + decisive + 1} positions in all; pass --span-tokens {fits} or less"
    )
