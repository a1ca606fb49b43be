"""Tests for scanner.measures.compression: SMAZ coder and compression-ratio thresholds."""

from __future__ import annotations

import base64
import gzip
import lzma
import math
import random
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scanner.measures import compression
from scanner.measures.compression import (
    METHODS,
    compression_ratio,
    smaz_compress,
    smaz_decompress,
    thresholds,
)

ENGLISH_PROSE = (
    "It was the best of times, it was the worst of times, it was the age of "
    "wisdom, it was the age of foolishness, it was the epoch of belief, it "
    "was the epoch of incredulity. In the morning the people of the town "
    "went to the market, and there they sold all that they had been able to "
    "make with their hands during the long winter.\n"
)

# Explicit bounds make hypothesis include lone surrogates, which st.text() omits.
non_ascii_text = st.text(alphabet=st.characters(min_codepoint=0x80), min_size=1)


def random_base64(seed: int, n_bytes: int = 600) -> str:
    # Seeded so a failure reproduces; base64 of random bytes is incompressible
    # text with mixed case and digits, the opposite of English prose.
    return base64.b64encode(random.Random(seed).randbytes(n_bytes)).decode("ascii")


# --- SMAZ coder -------------------------------------------------------------


@given(st.text())
def test_smaz_round_trip_arbitrary_text(text: str) -> None:
    assert smaz_decompress(smaz_compress(text)) == text


@given(non_ascii_text)
def test_smaz_round_trip_non_ascii(text: str) -> None:
    assert smaz_decompress(smaz_compress(text)) == text


@pytest.mark.parametrize(
    "text",
    [
        "日本語のテキスト",
        "naïve café — déjà vu",
        "emoji 🙂🚀 mixed",
        "\x00\x7f\x80",
        "A" * 1000,
        "lone \ud800",
    ],
)
def test_smaz_round_trip_examples(text: str) -> None:
    assert smaz_decompress(smaz_compress(text)) == text


@given(st.text(min_size=1))
def test_smaz_output_nonempty_for_nonempty_text(text: str) -> None:
    assert len(smaz_compress(text)) > 0


def test_smaz_empty_string() -> None:
    assert smaz_compress("") == b""
    assert smaz_decompress(b"") == ""


def test_smaz_codebook_hit_is_one_byte() -> None:
    # Greedy longest match must pick the whole entry, not its prefixes.
    for fragment in (" the ", "ation", " which ", "The "):
        assert len(smaz_compress(fragment)) == 1


def test_smaz_single_unknown_byte_uses_short_escape() -> None:
    assert smaz_compress("Z") == bytes((254, ord("Z")))


def test_smaz_long_verbatim_run_is_split_into_256_byte_chunks() -> None:
    text = "€" * 200  # 600 UTF-8 bytes, none of which are in the codebook
    encoded = smaz_compress(text)
    # Chunks of 256 + 256 + 88 bytes, each with a two-byte run header.
    assert len(encoded) == 600 + 3 * 2
    assert encoded[0] == 255 and encoded[1] == 255
    assert smaz_decompress(encoded) == text


@pytest.mark.parametrize("data", [bytes((254,)), bytes((255,)), bytes((255, 5, 65))])
def test_smaz_decompress_truncated_raises(data: bytes) -> None:
    with pytest.raises(ValueError, match="truncated SMAZ data"):
        smaz_decompress(data)


def test_smaz_codebook_shape() -> None:
    # Byte values 254 and 255 are escapes, so exactly 254 entries fit.
    book = compression._SMAZ_CODEBOOK
    assert len(book) == 254
    assert len(set(book)) == 254
    assert all(entry.isascii() and 1 <= len(entry) <= 7 for entry in book)


def test_smaz_compresses_english_prose() -> None:
    assert compression_ratio(ENGLISH_PROSE, "smaz") > 1.5


@pytest.mark.parametrize("seed", range(5))
def test_smaz_does_not_compress_random_base64(seed: int) -> None:
    assert compression_ratio(random_base64(seed), "smaz") < 1.2


# --- compression_ratio / thresholds ----------------------------------------


@settings(max_examples=30, deadline=None)
@given(st.text(min_size=1), st.sampled_from(METHODS))
def test_ratio_positive_finite(text: str, method: str) -> None:
    ratio = compression_ratio(text, method)
    assert math.isfinite(ratio)
    assert ratio > 0


def test_ratio_definition_matches_zlib_level_9() -> None:
    data = ENGLISH_PROSE.encode("utf-8")
    expected = len(data) / len(zlib.compress(data, 9))
    assert compression_ratio(ENGLISH_PROSE, "zlib") == expected


def test_ratio_counts_utf8_bytes_not_characters() -> None:
    text = "é"  # one character, two UTF-8 bytes, stored as one 2-byte run
    assert compression_ratio(text, "smaz") == 2 / 4


def test_ratio_definition_matches_gzip_and_xz() -> None:
    data = ENGLISH_PROSE.encode("utf-8")
    gz = len(gzip.compress(data, compresslevel=9, mtime=0))
    xz = len(lzma.compress(data, preset=9 | lzma.PRESET_EXTREME))
    assert compression_ratio(ENGLISH_PROSE, "gzip") == len(data) / gz
    assert compression_ratio(ENGLISH_PROSE, "lzma") == len(data) / xz
    # Both containers add framing, so raw DEFLATE (zlib) must beat gzip here.
    assert compression_ratio(ENGLISH_PROSE, "zlib") > compression_ratio(ENGLISH_PROSE, "gzip")


def test_gzip_repetitive_text_compresses_far_better_than_random() -> None:
    repetitive = "the cat sat on the mat. " * 100
    noise = random_base64(seed=42, n_bytes=len(repetitive) * 3 // 4)
    rep_ratio = compression_ratio(repetitive, "gzip")
    noise_ratio = compression_ratio(noise, "gzip")
    assert rep_ratio > 20
    assert rep_ratio > 10 * noise_ratio


def test_thresholds_returns_all_methods() -> None:
    result = thresholds(ENGLISH_PROSE)
    assert set(result) == {"gzip", "zlib", "lzma", "smaz"}
    for method, value in result.items():
        assert value == compression_ratio(ENGLISH_PROSE, method)


def test_thresholds_respects_method_subset() -> None:
    assert set(thresholds(ENGLISH_PROSE, methods=("smaz",))) == {"smaz"}


def test_unknown_method_raises_naming_value() -> None:
    expected = "unknown compression method 'foo'; choose one of gzip, zlib, lzma, smaz"
    with pytest.raises(ValueError) as excinfo:
        compression_ratio("hello", "foo")
    assert str(excinfo.value) == expected


def test_thresholds_unknown_method_raises() -> None:
    with pytest.raises(ValueError, match="'bz2'"):
        thresholds("hello", methods=("gzip", "bz2"))


@pytest.mark.parametrize("method", METHODS)
def test_empty_text_raises_naming_value(method: str) -> None:
    with pytest.raises(ValueError, match=r"empty text \(text=''\)"):
        compression_ratio("", method)


def test_thresholds_empty_text_raises() -> None:
    with pytest.raises(ValueError, match="text=''"):
        thresholds("")
