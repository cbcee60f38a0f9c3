"""Attention's causal softmax and its backward, fused, row by row; the products around them stay on BLAS.

The cpu backend runs causal attention as batched BLAS products (NumPy's matmul),
scores = Q K^T and out = P V, with these kernels between them. The scores are
stacked (queries, keys) blocks, one per head: a row of the (n*queries, keys)
array is query i = row % queries of its block, at position offset + i (offset =
keys - queries: the square blocks of the whole sequence have offset 0, the later
half of the queries against every key has offset T // 2), and sees keys
0 .. offset + i. The forward scales the visible scores,
exponentiates them (`exp_into`, vectorised) and normalises, writing exact zeros
for the future keys; its loops run over the visible keys rounded up to BLOCK
(the extra keys get the score HIDDEN, so exp gives exactly 0), as a loop of
variable length spends much of its time in the scalar remainder. As in the NumPy
backend, the max shift (a scalar loop) is skipped when the scores are safely
small: sqrt(sum of squares), summed in the vectorised pass, bounds every |score|.
The backward makes dS = P * (dP - sum_j P dP) * scale over the visible keys.
At --precision bf16 both also write their result rounded to bfloat16 (`bits`,
as backends/bf16.py's `bf16_bits` rounds: nearest, ties to even, a NaN kept a
quiet NaN), each row while it is in cache: P and dS are the inputs of the
products that follow (P V, dS K and dS^T Q), which then read the bits instead
of rounding P and dS in NumPy's passes of their own.
One thread, rows in order (the threads each run a slice of the batch instead:
cpu_streams.py), so the result does not depend on the thread count.

(A flash-attention kernel that looped over the keys for each query, with no
T x T tensor, lost to this at every benchmark shape, widths 16 to 64: BLAS's
products beat scalar-broadcast loops over a head width too short to vectorise.)
"""

from __future__ import annotations

import numpy as np

from microgpt.backends.cpu_kernels.bf16 import round_row
from microgpt.backends.cpu_kernels.fast_exp import exp_into
from microgpt.backends.cpu_kernels.jit import inline, kernel

BLOCK = 16  # a row's loops run over its visible columns rounded up to this (a float32 AVX-512 register)
HIDDEN = -1e30  # the shifted score of a column past the row's query: exp gives exactly 0
EXP_SAFE = 60.0  # |score| below this: exp neither overflows nor underflows to 0, so no max shift is needed


@inline()
def _softmax_block(scores, scale, out, block, queries, offset, scratch):
    """out's rows of one (queries, keys) block = the causal softmax of scores * scale, query row q seeing
    columns 0 .. offset + q."""
    cols = scores.shape[1]
    for q in range(queries):
        r = block * queries + q
        i = offset + q  # the query's position: its last visible column
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
def _softmax_backward_block(probs, dprobs, scale, out, block, queries, offset):
    """out's rows of one (queries, keys) block = probs * (dprobs - sum_j probs dprobs) * scale, 0 past each
    row's query (query row q at position offset + q)."""
    for q in range(queries):
        r = block * queries + q
        i = offset + q
        dot = probs.dtype.type(0)
        for j in range(i + 1):
            dot += probs[r, j] * dprobs[r, j]
        for j in range(i + 1):
            out[r, j] = probs[r, j] * (dprobs[r, j] - dot) * scale
        out[r, i + 1:] = 0


@inline()
def _round_bf16(out, bits, block, queries):
    """bits' rows of one block = out's float32 rows rounded to bfloat16 (cpu_kernels/bf16.py)."""
    for r in range(block * queries, (block + 1) * queries):
        round_row(out[r], bits[r])


@kernel()
def causal_softmax(scores, scale, out, queries, offset, bits=None):
    """out (n*queries, keys) = the causal softmax of scores * scale, row r seeing columns 0 .. offset + r % queries;
    and bits (uint16, out's shape; float32 only) = out rounded to bfloat16 where given."""
    scratch = np.empty(scores.shape[1], dtype=np.int32)  # for exp_into
    for block in range(scores.shape[0] // queries):
        _softmax_block(scores, scale, out, block, queries, offset, scratch)
        if bits is not None:
            _round_bf16(out, bits, block, queries)


@kernel()
def causal_softmax_backward(probs, dprobs, scale, out, queries, offset, bits=None):
    """out (n*queries, keys) = probs * (dprobs - sum_j probs dprobs) * scale over each row's visible columns
    (0 .. offset + r % queries), 0 after; and bits = out rounded to bfloat16 where given (as causal_softmax)."""
    for block in range(probs.shape[0] // queries):
        _softmax_backward_block(probs, dprobs, scale, out, block, queries, offset)
        if bits is not None:
            _round_bf16(out, bits, block, queries)
