"""Attention's causal softmax and its backward, fused, row by row; the products around them stay on BLAS.

The cpu backend runs causal attention as the base class does: scores = Q K^T and
out = P V as batched BLAS products (NumPy's matmul), with these kernels between
them. A row of the (n*T, T) stacked score blocks is query i = row % T of its
block, and sees keys 0 .. i. The forward scales the visible scores,
exponentiates them (`exp_into`, vectorised) and normalises, writing exact zeros
for the future keys; its loops run over the visible keys rounded up to BLOCK
(the extra keys get the score HIDDEN, so exp gives exactly 0), as a loop of
variable length spends much of its time in the scalar remainder. As in the NumPy
backend, the max shift (a scalar loop) is skipped when the scores are safely
small: sqrt(sum of squares), summed in the vectorised pass, bounds every |score|.
The backward makes dS = P * (dP - sum_j P dP) * scale over the visible keys.
One thread, rows in order (a parallel launch costs more than these kernels save
on 2 cores while BLAS's threads are spinning), so the result is the same for
any thread count.

(A flash-attention kernel that looped over the keys for each query, with no
T x T tensor, lost to this at every benchmark shape, widths 16 to 64: BLAS's
products beat scalar-broadcast loops over a head width too short to vectorise.)
"""

from __future__ import annotations

import numpy as np

from microgpt.backends.cpu_kernels.fast_exp import exp_into
from microgpt.backends.cpu_kernels.jit import inline, kernel

BLOCK = 16  # a row's loops run over its visible columns rounded up to this (a float32 AVX-512 register)
HIDDEN = -1e30  # the shifted score of a column past the row's query: exp gives exactly 0
EXP_SAFE = 60.0  # |score| below this: exp neither overflows nor underflows to 0, so no max shift is needed


@inline()
def _softmax_block(scores, scale, out, block, scratch):
    """out's rows of one (T, T) block = the causal softmax of scores * scale, row i seeing columns 0 .. i."""
    cols = scores.shape[1]
    for i in range(cols):
        r = block * cols + i
        row = out[r]
        end = min(cols, (i + BLOCK) // BLOCK * BLOCK)  # the visible columns, rounded up to BLOCK
        squares = scores.dtype.type(0)  # sqrt(squares) bounds every visible |score|
        for j in range(end):
            value = scores[r, j] * scale if j <= i else scores.dtype.type(0)
            squares += value * value
            row[j] = value if j <= i else HIDDEN
        if not squares < EXP_SAFE * EXP_SAFE:  # shift by the row's max (also taken for NaN)
            top = row[0]
            for j in range(1, i + 1):
                top = max(top, row[j])
            for j in range(i + 1):
                row[j] -= top
        exp_into(row, end, scratch)
        total = scores.dtype.type(0)
        for j in range(end):
            total += row[j]
        inv = scores.dtype.type(1) / total
        for j in range(end):
            row[j] *= inv
        row[end:] = 0


@inline()
def _softmax_backward_block(probs, dprobs, scale, out, block):
    """out's rows of one (T, T) block = probs * (dprobs - sum_j probs dprobs) * scale, 0 past each row's query."""
    cols = probs.shape[1]
    for i in range(cols):
        r = block * cols + i
        dot = probs.dtype.type(0)
        for j in range(i + 1):
            dot += probs[r, j] * dprobs[r, j]
        for j in range(i + 1):
            out[r, j] = probs[r, j] * (dprobs[r, j] - dot) * scale
        out[r, i + 1:] = 0


@kernel()
def causal_softmax(scores, scale, out):
    """out (rows, T) = the causal softmax of scores * scale, row r seeing columns 0 .. r % T."""
    scratch = np.empty(scores.shape[1], dtype=np.int32)  # for exp_into
    for block in range(scores.shape[0] // scores.shape[1]):
        _softmax_block(scores, scale, out, block, scratch)


@kernel()
def causal_softmax_backward(probs, dprobs, scale, out):
    """out (rows, T) = probs * (dprobs - sum_j probs dprobs) * scale over each row's visible columns, 0 after."""
    for block in range(probs.shape[0] // probs.shape[1]):
        _softmax_backward_block(probs, dprobs, scale, out, block)
