"""bfloat16 rounding, the specification: what `--precision bf16` does to the inputs of a matrix product.

A bfloat16 is the top 16 bits of a float32 (sign, the same 8 exponent bits, 7
mantissa bits), so every bf16 value is a float32 value and a float32 rounds to
bf16 by rounding away its low 16 bits: to the nearest, ties to the even one
(the last kept bit 0). On the uint32 view that is adding 0x7FFF plus the last
kept bit and dropping the low half; a carry out of the mantissa moves to the
exponent, so the largest float32s round up to infinity as they should, and
subnormals round like any other number (the exponent range is float32's).
A NaN is kept a NaN, made quiet (its top mantissa bit set), since the adding
could carry a NaN's low bits into infinity. Infinities stay infinities.

`bf16_bits` gives the 16 bits (uint16, what a bf16 product kernel reads) and
`round_bf16` the same values as float32: the numpy backend's bf16 products are
float32 products of `round_bf16` of both inputs (numpy_backend.py).
"""

from __future__ import annotations

import numpy as np

from microgpt.core.registry import PRECISIONS  # fp32, bf16: of the inputs of every matrix product


def bf16_bits(x) -> np.ndarray:
    """The bfloat16 nearest each float32 of x (ties to even; NaN stays a quiet NaN), as uint16 bits, x's shape."""
    values = np.asarray(x, dtype=np.float32)
    u = values.view(np.uint32)
    rounded = u >> np.uint32(16)  # the last kept bit ...
    rounded &= np.uint32(1)
    rounded += np.uint32(0x7FFF)  # ... plus 0x7FFF: the half, less one where that bit is even (ties to even)
    rounded += u  # a carry into bit 16 is rounding up
    rounded >>= np.uint32(16)
    bits = rounded.astype(np.uint16)
    nan = np.isnan(values)
    if nan.any():
        bits[nan] = ((u[nan] >> np.uint32(16)) | np.uint32(0x0040)).astype(np.uint16)
    return bits


def widen(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bits (uint16) as the float32 numbers they are (exact)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def round_bf16(x) -> np.ndarray:
    """x's float32 values rounded to the nearest bfloat16 (ties to even), as a new float32 array of x's shape."""
    return widen(bf16_bits(x))


def check_precision(precision: str) -> str:
    """`precision` when it is one of PRECISIONS, else a ValueError naming them."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    return precision
