"""The prompt vocabulary: which token ids GCG may place in a prompt (METHOD.md, defect 2)."""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def _printable_ascii(text: str) -> bool:
    return bool(text) and text.isascii() and all(c.isprintable() or c in " \n\t" for c in text)


def allowed_token_ids(tokenizer, embedding_rows: int, allow_non_ascii: bool) -> list[int]:
    """Real, non-special, non-added token ids whose decoded string encodes back to the same single id.

    Embedding rows past len(tokenizer) are padding with no token and are never allowed; ASCII-only
    (printable) unless `allow_non_ascii`, since non-ASCII pieces are often partial UTF-8 bytes."""
    limit = min(len(tokenizer), embedding_rows)
    excluded = set(tokenizer.all_special_ids) | set(getattr(tokenizer, "added_tokens_decoder", {}) or {})
    ids = [i for i in range(limit) if i not in excluded]
    texts = tokenizer.batch_decode(
        [[i] for i in ids], skip_special_tokens=False, clean_up_tokenization_spaces=False
    )
    keep = [
        (i, t)
        for i, t in zip(ids, texts, strict=True)
        if (_printable_ascii(t) if not allow_non_ascii else (t and "\ufffd" not in t))
    ]
    encoded = tokenizer([t for _, t in keep], add_special_tokens=False).input_ids if keep else []
    allowed = [i for (i, _), enc in zip(keep, encoded, strict=True) if enc == [i]]
    log.info("prompt vocabulary: %d of %d token ids allowed", len(allowed), embedding_rows)
    return allowed
