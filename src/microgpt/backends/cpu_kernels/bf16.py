"""bfloat16 rounding inside the kernels: backends/bf16.py's rule on one float32's bits, a row, a whole array.

`bf16_of(u)` rounds the float32 whose bits are the uint32 u as `bf16_bits` does
(nearest, ties to even: add 0x7FFF plus the last kept bit, drop the low half; a
NaN keeps its top bits, made quiet). Kernels that produce a matrix product's
input call `round_row` on each row they have just written, while it is in
cache (bias + ReLU, ReLU's backward, the causal softmax and its backward), so
the product reads the bits without a pass of its own; `round_words` rounds
any other array (a weight, a residual gradient, LayerNorm's output: inside
LayerNorm's kernel the extra loop changed how its row sums vectorise, and so
its float32 result) in one compiled pass instead of NumPy's several.
"""

from __future__ import annotations

import numpy as np

from microgpt.backends.cpu_kernels.jit import inline, kernel


@inline()
def bf16_of(u):
    """The bfloat16 bits (uint16) nearest the float32 whose bits are u (uint32)."""
    if (u & 0x7FFFFFFF) > 0x7F800000:  # NaN: its top bits, made quiet
        return np.uint16((u >> 16) | 0x40)
    return np.uint16((u + 0x7FFF + ((u >> 16) & 1)) >> 16)


@inline()
def round_row(values, bits):
    """bits (uint16) = values (a contiguous float32 row) rounded to bfloat16."""
    words = values.view(np.uint32)
    for j in range(words.shape[0]):
        bits[j] = bf16_of(words[j])


@kernel()
def round_words(words, bits):
    """bits (uint16, (n, rows, cols)) = the float32s whose bits are words (uint32, (n, rows, cols), any strides)
    rounded to bfloat16."""
    for i in range(words.shape[0]):
        for r in range(words.shape[1]):
            for j in range(words.shape[2]):
                bits[i, r, j] = bf16_of(words[i, r, j])
