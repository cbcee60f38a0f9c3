"""Fused causal attention: scores, scale, mask, softmax and probs @ V in one pass per head, and its backward.

q (n, Tq, w), k and v (n, Tk, w), C-contiguous; query i sits at position
Tk - Tq + i and sees keys 0 .. Tk - Tq + i. One head is one parallel task and
runs its queries in order, so every sum has a fixed order whatever the thread
count. No masked (Tq, Tk) score tensor is ever written: each query's scores live
in a row buffer of length Tk.

Vectorisation: every inner loop runs along the keys, never along the head width
(16 here: too short for LLVM's vector body, it would run in the scalar remainder
loop; measured 6x slower). K, V and the dK, dV accumulators are held transposed,
(w, Tk rounded up to BLOCK), zero-padded, and a query's loops run to its visible
count rounded up to BLOCK: the few keys past its position get the score -1e30,
so their probability is exactly 0 and they add nothing. The score loops take
four columns of K per pass, so each score is loaded and stored once per four
multiply-adds. softmax's max shift (a scalar loop: a max does not vectorise
without dropping NaN semantics) is skipped when Cauchy-Schwarz bounds every
score of the query below EXP_SAFE in size, as the NumPy backend does (a shift
only guards exp; the log-sum-exp saved for the backward includes whatever shift
was used).

The forward saves each query's log-sum-exp; the backward recomputes the
probabilities from it (flash-attention style), so saved state is O(n T), not O(n T^2).
"""

from __future__ import annotations

import numpy as np
from numba import prange

from microgpt.backends.cpu_kernels.fast_exp import exp_into
from microgpt.backends.cpu_kernels.jit import inline, kernel

BLOCK = 16  # loops over keys run to a multiple of this (a float32 AVX-512 register)
ROWS = 4  # queries whose dK, dV contributions the backward adds in one pass (the code below spells out 4)
HIDDEN = -1e30  # the score of a key past the query's position: exp gives exactly 0
EXP_SAFE = 60.0  # |score| below this: exp neither overflows nor underflows to 0, so no max shift is needed


@inline()
def _transposed(x, padded):
    """(w, padded): x (t, w) transposed, zero-padded past t."""
    t, w = x.shape
    out = np.zeros((w, padded), dtype=x.dtype)
    for j in range(t):
        for c in range(w):
            out[c, j] = x[j, c]
    return out


@inline()
def _norm(row):
    """The Euclidean length of a 1-D row."""
    total = row.dtype.type(0)
    for c in range(row.shape[0]):
        total += row[c] * row[c]
    return np.sqrt(total)


@inline()
def _row_times(row, scale, mt, end, dst):
    """dst[:end] = (row * scale) @ mt[:, :end] for row (w,) and mt (w, padded), four columns of mt a pass."""
    w = mt.shape[0]
    dst[:end] = 0
    c = 0
    while c + 4 <= w:
        a0, a1, a2, a3 = row[c] * scale, row[c + 1] * scale, row[c + 2] * scale, row[c + 3] * scale
        m0, m1, m2, m3 = mt[c], mt[c + 1], mt[c + 2], mt[c + 3]
        for j in range(end):
            dst[j] += a0 * m0[j] + a1 * m1[j] + a2 * m2[j] + a3 * m3[j]
        c += 4
    while c < w:
        a0 = row[c] * scale
        m0 = mt[c]
        for j in range(end):
            dst[j] += a0 * m0[j]
        c += 1


@inline()
def _exp_shifted(scores, visible, end, shift, scratch):
    """scores[:end] = exp(scores - shift) for the visible keys, exactly 0 for the rest."""
    for j in range(visible):
        scores[j] -= shift
    for j in range(visible, end):
        scores[j] = HIDDEN
    exp_into(scores, end, scratch)


@kernel(parallel=True)
def attention_forward(q, k, v, scale, out, lse):
    """out (n, Tq, w) and lse (n, Tq), written; scale has the arrays' dtype."""
    n, tq, w = q.shape
    tk = k.shape[1]
    offset = tk - tq
    padded = (tk + BLOCK - 1) // BLOCK * BLOCK
    for h in prange(n):
        kt = _transposed(k[h], padded)  # (w, padded)
        vt = _transposed(v[h], padded)  # (w, padded)
        scores = np.empty(padded, dtype=q.dtype)  # one query's scores, then its probabilities
        scratch = np.empty(padded, dtype=np.int32)  # for exp_into
        longest_key = q.dtype.type(0)
        for j in range(tk):
            longest_key = max(longest_key, _norm(k[h, j]))
        for i in range(tq):
            visible = offset + i + 1
            end = (visible + BLOCK - 1) // BLOCK * BLOCK
            _row_times(q[h, i], scale, kt, end, scores)
            top = q.dtype.type(0)  # the shift: 0 when every score is safely small, else the row's max
            if not _norm(q[h, i]) * longest_key * abs(scale) < EXP_SAFE:  # also taken for NaN
                top = scores[0]
                for j in range(1, visible):
                    top = max(top, scores[j])
            _exp_shifted(scores, visible, end, top, scratch)
            total = q.dtype.type(0)
            for j in range(end):
                total += scores[j]
            inv = q.dtype.type(1) / total
            for c in range(w):
                vc = vt[c]
                acc = q.dtype.type(0)
                for j in range(end):
                    acc += scores[j] * vc[j]
                out[h, i, c] = acc * inv
            lse[h, i] = top + np.log(total)


@inline()
def _group_column(x, first, rows, c):
    """x[first + r, c] for r < ROWS as four scalars, 0 for rows past `rows`."""
    zero = x.dtype.type(0)
    return (x[first, c], x[first + 1, c] if rows > 1 else zero, x[first + 2, c] if rows > 2 else zero,
            x[first + 3, c] if rows > 3 else zero)


@inline()
def _softmax_backward_row(q_row, dout_row, kt, vt, scale, row_lse, visible, end, probs, dscores, scratch):
    """probs[:end] = the query's probabilities and dscores[:end] its score gradients, both 0 past visible."""
    _row_times(q_row, scale, kt, end, probs)
    _exp_shifted(probs, visible, end, row_lse, scratch)
    _row_times(dout_row, probs.dtype.type(1), vt, end, dscores)  # dP = dout_i V^T
    dot = probs.dtype.type(0)  # sum_j p_j dP_j: softmax's backward subtracts it from every dP_j
    for j in range(end):
        dot += probs[j] * dscores[j]
    for j in range(end):
        dscores[j] = probs[j] * (dscores[j] - dot) * scale


@kernel(parallel=True)
def attention_backward(q, k, v, lse, dout, scale, dq, dk, dv):
    """dq (n, Tq, w), dk and dv (n, Tk, w), written; lse (n, Tq) from the forward.

    Queries go in groups of ROWS: each one's probabilities and score gradients are made row by row,
    then one pass over the keys per column adds the whole group into dK and dV (each entry loaded and
    stored once per group, not once per query) and makes the group's dQ entries.
    """
    n, tq, w = q.shape
    tk = k.shape[1]
    offset = tk - tq
    padded = (tk + BLOCK - 1) // BLOCK * BLOCK
    for h in prange(n):
        kt = _transposed(k[h], padded)  # (w, padded)
        vt = _transposed(v[h], padded)  # (w, padded)
        dkt = np.zeros((w, padded), dtype=q.dtype)  # (w, padded): dK transposed, summed over the queries
        dvt = np.zeros((w, padded), dtype=q.dtype)  # (w, padded)
        probs = np.zeros((ROWS, padded), dtype=q.dtype)  # (ROWS, padded): the group's probabilities
        dscores = np.zeros((ROWS, padded), dtype=q.dtype)  # (ROWS, padded): their score gradients
        scratch = np.empty(padded, dtype=np.int32)  # for exp_into
        for first in range(0, tq, ROWS):
            rows = min(ROWS, tq - first)
            group_end = (offset + first + rows + BLOCK - 1) // BLOCK * BLOCK  # the last query's end
            for r in range(rows):
                i = first + r
                visible = offset + i + 1
                end = (visible + BLOCK - 1) // BLOCK * BLOCK
                _softmax_backward_row(q[h, i], dout[h, i], kt, vt, scale, lse[h, i], visible, end,
                                      probs[r], dscores[r], scratch)
                probs[r, end:group_end] = 0
                dscores[r, end:group_end] = 0
            for r in range(rows, ROWS):  # a short last group: the missing rows add nothing
                probs[r, :group_end] = 0
                dscores[r, :group_end] = 0
            p0, p1, p2, p3 = probs[0], probs[1], probs[2], probs[3]
            s0, s1, s2, s3 = dscores[0], dscores[1], dscores[2], dscores[3]
            for c in range(w):
                g0, g1, g2, g3 = _group_column(dout[h], first, rows, c)
                a0, a1, a2, a3 = _group_column(q[h], first, rows, c)
                kc, dkc, dvc = kt[c], dkt[c], dvt[c]
                acc0 = acc1 = acc2 = acc3 = q.dtype.type(0)
                for j in range(group_end):
                    dvc[j] += g0 * p0[j] + g1 * p1[j] + g2 * p2[j] + g3 * p3[j]
                    dkc[j] += a0 * s0[j] + a1 * s1[j] + a2 * s2[j] + a3 * s3[j]
                    kj = kc[j]
                    acc0 += s0[j] * kj
                    acc1 += s1[j] * kj
                    acc2 += s2[j] * kj
                    acc3 += s3[j] * kj
                accs = (acc0, acc1, acc2, acc3)
                for r in range(rows):
                    dq[h, first + r, c] = accs[r]
        for j in range(tk):
            for c in range(w):
                dk[h, j, c] = dkt[c, j]
                dv[h, j, c] = dvt[c, j]
