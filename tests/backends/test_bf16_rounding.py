"""bf16 rounding (backends/bf16.py), the specification of --precision bf16's product inputs, against known values:
ties to even, NaN, infinities, subnormals, and every 16-bit pattern's round trip."""

import numpy as np
import pytest

from microgpt.backends.bf16 import bf16_bits, check_precision, round_bf16, widen


def f32(bits: int) -> np.float32:
    return np.array([bits], dtype=np.uint32).view(np.float32)[0]


@pytest.mark.parametrize("bits, expected", [
    (0x3F800000, 0x3F80),  # 1.0 exactly
    (0x3F807FFF, 0x3F80),  # just below half an ulp: down
    (0x3F808000, 0x3F80),  # a tie, last kept bit even (0): stays
    (0x3F818000, 0x3F82),  # a tie, last kept bit odd (1): up to even
    (0x3F808001, 0x3F81),  # just above half an ulp: up
    (0xBF818000, 0xBF82),  # the same tie, negative: to even in size
    (0x7F7FFFFF, 0x7F80),  # the largest float32 rounds up to infinity
    (0x7F7F7FFF, 0x7F7F),  # ... and one below the tie stays the largest bf16
    (0x7F800000, 0x7F80),  # +inf
    (0xFF800000, 0xFF80),  # -inf
    (0x00000001, 0x0000),  # the smallest subnormal rounds to +0
    (0x00008000, 0x0000),  # a subnormal tie at 0 (even): to 0
    (0x00018000, 0x0002),  # a subnormal tie at 1 (odd): to 2
    (0x007FFFFF, 0x0080),  # the largest subnormal rounds up to the smallest normal
    (0x80000000, 0x8000),  # -0 keeps its sign
])
def test_rounds_to_nearest_even(bits, expected):
    assert int(bf16_bits(np.array([f32(bits)]))[0]) == expected


@pytest.mark.parametrize("bits", [0x7FC00000, 0x7F800001, 0x7FFFFFFF, 0xFF800001, 0xFFC00000])
def test_nan_stays_a_quiet_nan(bits):
    """A NaN whose payload is in the low bits would carry into infinity (0x7F800001) or flip its sign
    (0x7FFFFFFF) under the plain rounding: it stays a NaN, quiet, with its sign."""
    out = bf16_bits(np.array([f32(bits)]))[0]
    assert np.isnan(widen(np.array([out]))[0])
    assert out & 0x0040 and (out >> 15) == (bits >> 31)


def test_every_bf16_is_kept_and_round_bf16_is_its_float32():
    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    values = widen(every)
    finite = ~np.isnan(values)
    assert np.array_equal(bf16_bits(values)[finite], every[finite])
    x = np.random.default_rng(0).standard_normal((7, 9)).astype(np.float32)
    rounded = round_bf16(x)
    assert rounded.dtype == np.float32 and rounded.shape == x.shape
    assert np.array_equal(rounded.view(np.uint32) & 0xFFFF, np.zeros(x.shape, np.uint32))
    assert np.all(np.abs(rounded - x) <= np.abs(x) * 2.0**-8)  # within half an ulp of 8 significant bits


def test_round_bf16_of_a_transposed_view_is_the_view_rounded():
    x = np.random.default_rng(1).standard_normal((5, 3)).astype(np.float32)
    assert np.array_equal(round_bf16(x.T), round_bf16(x).T)


def test_check_precision_names_the_choices():
    assert check_precision("bf16") == "bf16"
    with pytest.raises(ValueError, match="fp32, bf16"):
        check_precision("fp16")
