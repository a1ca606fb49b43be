"""Compression ratios of a text under general-purpose compressors.

The Adversarial Compression Ratio (ACR) of a target text y is
``len(y) / len(shortest prompt that makes the model emit y)``. Calling y
"memorized" when ACR(y) > 1 ignores how compressible y already is: a
boilerplate licence or a run of repeated tokens can be elicited by a short
prompt without the model having memorized anything in particular. A fairer
threshold tau is what a compressor that knows nothing about the model
achieves on the same text, so y counts as memorized at threshold "gzip" when
ACR(y) > compression_ratio(y, "gzip").

Four reference compressors are offered because they model text differently:
gzip and zlib (LZ77 + Huffman, differing only in container overhead), lzma
(a much stronger LZ + range coder) and SMAZ, a tiny static codebook of common
English fragments that compresses short English strings where the adaptive
compressors cannot yet have learnt anything. Everything here is standard
library only so the thresholds can be computed without a model or a GPU.
"""

from __future__ import annotations

import gzip
import lzma
import zlib
from collections.abc import Iterable

METHODS: tuple[str, ...] = ("gzip", "zlib", "lzma", "smaz")

# SMAZ-style codebook: 254 short, common English fragments (ASCII only). It
# follows the SMAZ scheme (one output byte per codebook hit) but is an
# independent list, not byte-identical to antirez's original table, so its
# output is not interchangeable with other SMAZ implementations. Entries are
# grouped by kind; the order only fixes which byte each entry encodes to.
# fmt: off
_SMAZ_CODEBOOK: tuple[str, ...] = (
    # Single characters, so ordinary lowercase prose never needs an escape.
    " ", "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m",
    "n", "o", "p", "q", "r", "s", "t", "u", "v", "w", "x", "y", "z",
    ".", ",", "\n", "'", '"', "-", "?", "!", ":", ";", "(", ")",
    "0", "1", "2",
    # Frequent whole words, spaces included so one byte covers the gap too.
    " the ", " of ", " and ", " to ", " in ", " is ", " a ", " that ",
    " for ", " it ", " as ", " was ", " with ", " be ", " by ", " on ",
    " not ", " he ", " this ", " are ", " or ", " his ", " from ", " at ",
    " which ", " but ", " have ", " an ", " they ", " you ", " were ",
    " had ", " her ", " one ", " all ", " we ", " can ", " has ", " been ",
    " their ",
    # Sentence openers.
    "The ", "In ", "It ", "This ", "A ", "I ",
    # Punctuation followed by the whitespace that nearly always comes next.
    ". ", ", ", ".\n", "\n\n", "; ", ": ", "'s ", "s. ", "e. ", "s, ",
    # Word endings that swallow the following space.
    "e ", "s ", "t ", "d ", "n ", "y ", "r ", "ed ", "ing ", "es ", "er ",
    "ly ", "al ", "nt ", "on ", "ion ", "ng ", "ts ", "rs ", "le ", "ce ",
    "se ", "te ", "re ", "ve ",
    # Word beginnings that absorb the preceding space.
    " t", " a", " o", " s", " w", " i", " c", " b", " p", " f", " m", " h",
    " d", " r", " l", " e", " n", " th", " wh", " co", " re", " pr", " de",
    " st",
    # Most frequent English bigrams.
    "th", "he", "in", "er", "an", "re", "on", "at", "en", "nd", "ti", "es",
    "or", "te", "ed", "is", "it", "al", "ar", "st", "to", "nt", "ng", "se",
    "ha", "as", "ou", "io", "le", "ve", "co", "me", "de", "hi", "ri", "ro",
    "ic", "ne", "ea", "ra", "ce", "li", "ch", "ll", "be", "ma", "si", "om",
    "ur", "ca", "el", "ta", "la", "ns", "di", "fo", "ho", "pe", "ec", "pr",
    # Frequent trigrams and longer word pieces.
    "the", "and", "ing", "ion", "tio", "ent", "ati", "for", "her", "ter",
    "hat", "tha", "ere", "ate", "his", "con", "res", "ver", "all", "ons",
    "nce", "men", "ith", "ted", "ers", "pro", "thi", "wit", "are", "not",
    "was", "ist", "ear", "ain", "one", "our", "ment", "tion", "ation",
    "ight", "ould", "ough", "ther", "ence", "ally", "able", "ness",
)
# fmt: on

# Byte values 0..253 are codebook indices, so only two values remain for
# escaping bytes the codebook cannot express.
_ESCAPE_ONE = 254  # next byte is verbatim
_ESCAPE_RUN = 255  # next byte is (run length - 1), then the run itself
_MAX_RUN = 256  # largest run a single length byte can describe

_SMAZ_DECODE: tuple[bytes, ...] = tuple(e.encode("ascii") for e in _SMAZ_CODEBOOK)
_SMAZ_ENCODE: dict[bytes, int] = {e: i for i, e in enumerate(_SMAZ_DECODE)}
# Bounding candidate lengths keeps encoding O(n * longest) dict lookups.
_SMAZ_LONGEST = max(len(e) for e in _SMAZ_DECODE)


def _longest_match(data: bytes, pos: int) -> tuple[int, int] | None:
    """Return (codebook index, length) of the longest entry at ``pos``."""
    for length in range(min(_SMAZ_LONGEST, len(data) - pos), 0, -1):
        index = _SMAZ_ENCODE.get(data[pos : pos + length])
        if index is not None:
            return index, length
    return None


def _flush_verbatim(out: bytearray, pending: bytearray) -> None:
    """Emit ``pending`` as escaped literal bytes and clear it."""
    for start in range(0, len(pending), _MAX_RUN):
        chunk = pending[start : start + _MAX_RUN]
        if len(chunk) == 1:
            # One literal costs two bytes either way; the short form saves one.
            out += bytes((_ESCAPE_ONE, chunk[0]))
        else:
            out += bytes((_ESCAPE_RUN, len(chunk) - 1)) + chunk
    pending.clear()


def _utf8(text: str) -> bytes:
    # "surrogatepass" lets lone surrogates (legal in a Python str, e.g. from
    # a lossy decode) through as 3 bytes each instead of raising; for every
    # other string this is exactly text.encode("utf-8").
    return text.encode("utf-8", "surrogatepass")


def smaz_compress(text: str) -> bytes:
    """Compress ``text`` with the SMAZ-style codebook (greedy longest match).

    Works on the UTF-8 bytes, so any string round-trips through
    :func:`smaz_decompress`; non-ASCII bytes are simply stored verbatim.
    """
    return _smaz_encode(_utf8(text))


def _smaz_encode(data: bytes) -> bytes:
    out = bytearray()
    # Unmatched bytes are batched so a run of them shares one escape header.
    pending = bytearray()
    pos = 0
    while pos < len(data):
        match = _longest_match(data, pos)
        if match is None:
            pending.append(data[pos])
            pos += 1
            continue
        _flush_verbatim(out, pending)
        out.append(match[0])
        pos += match[1]
    _flush_verbatim(out, pending)
    return bytes(out)


def smaz_decompress(data: bytes) -> str:
    """Invert :func:`smaz_compress`.

    Raises ValueError if ``data`` ends in the middle of an escape sequence
    or does not decode to valid UTF-8.
    """
    out = bytearray()
    pos = 0
    while pos < len(data):
        code = data[pos]
        if code < _ESCAPE_ONE:
            out += _SMAZ_DECODE[code]
            pos += 1
            continue
        if code == _ESCAPE_ONE:
            start, end = pos + 1, pos + 2
        else:
            if pos + 1 >= len(data):
                raise ValueError(
                    f"truncated SMAZ data: run escape at offset {pos} has no "
                    "length byte; pass the complete output of smaz_compress"
                )
            start = pos + 2
            end = start + data[pos + 1] + 1
        if end > len(data):
            raise ValueError(
                f"truncated SMAZ data: escape at offset {pos} needs bytes up "
                f"to offset {end} but input has {len(data)}; pass the complete "
                "output of smaz_compress"
            )
        out += data[start:end]
        pos = end
    return out.decode("utf-8", "surrogatepass")


def _check_method(method: str) -> None:
    if method not in METHODS:
        raise ValueError(f"unknown compression method {method!r}; choose one of {', '.join(METHODS)}")


def _compressed_size(data: bytes, method: str) -> int:
    """Size in bytes of ``data`` compressed with ``method`` (strongest settings)."""
    if method == "gzip":
        # mtime=0 makes the bytes reproducible (the size never depended on it).
        # The gzip container adds 18 bytes of header and trailer.
        return len(gzip.compress(data, compresslevel=9, mtime=0))
    if method == "zlib":
        # Same DEFLATE stream as gzip with only 6 bytes of framing.
        return len(zlib.compress(data, 9))
    if method == "lzma":
        # Default .xz container: stream header/footer, block header, index and
        # CRC64 add roughly 60 bytes, which dominates for short texts and makes
        # lzma look weaker than it is there. FORMAT_RAW would avoid this but
        # needs the filter chain to be known to any decoder, so the standard,
        # self-describing format is kept and the overhead accepted.
        return len(lzma.compress(data, preset=9 | lzma.PRESET_EXTREME))
    return len(_smaz_encode(data))


def compression_ratio(text: str, method: str) -> float:
    """Return UTF-8 length of ``text`` divided by its compressed length.

    Values above 1 mean the compressor shrank the text. Raises ValueError
    for an unknown ``method`` or an empty ``text`` (whose ratio is undefined).
    """
    _check_method(method)
    if not text:
        raise ValueError(
            f"cannot compute a compression ratio of empty text (text={text!r}); pass a non-empty string"
        )
    data = _utf8(text)
    return len(data) / _compressed_size(data, method)


def thresholds(text: str, methods: Iterable[str] = METHODS) -> dict[str, float]:
    """Return ``{method: compression_ratio(text, method)}`` for each method.

    These are the data-dependent memorization thresholds: ``text`` is
    memorized at threshold ``m`` when its ACR exceeds ``result[m]``.
    """
    return {method: compression_ratio(text, method) for method in methods}
