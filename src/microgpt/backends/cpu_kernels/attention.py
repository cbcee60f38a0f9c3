"""Fused causal attention: scores, scale, mask, softmax and probs @ V in one pass per head, and its backward.

q (n, Tq, w), k and v (n, Tk, w), C-contiguous; query i sits at position
Tk - Tq + i and sees keys 0 .. Tk - Tq + i. One head is one parallel task and
runs its queries in order, so every sum has a fixed order whatever the thread
count. No masked (Tq, Tk) score tensor is ever written: each query's scores live
in a row buffer of length Tk. K and V are transposed once per head (w, Tk) so
the score and dP loops run along keys, vectorised, with no horizontal sums.

The forward saves each query's log-sum-exp; the backward recomputes the
probabilities from it (flash-attention style), so saved state is O(n T), not O(n T^2).
"""

from __future__ import annotations

import numpy as np
from numba import prange

from microgpt.backends.cpu_kernels.jit import kernel


@kernel(parallel=True)
def attention_forward(q, k, v, scale, out, lse):
    """out (n, Tq, w) and lse (n, Tq), written; scale has the arrays' dtype."""
    n, tq, w = q.shape
    tk = k.shape[1]
    offset = tk - tq
    for h in prange(n):
        kt = np.ascontiguousarray(k[h].T)  # (w, Tk)
        scores = np.empty(tk, dtype=q.dtype)  # one query's scores, then its probabilities
        acc = np.empty(w, dtype=q.dtype)  # one query's output row
        for i in range(tq):
            visible = offset + i + 1
            scores[:visible] = 0
            for c in range(w):
                qc = q[h, i, c] * scale
                for j in range(visible):
                    scores[j] += qc * kt[c, j]
            top = scores[0]
            for j in range(1, visible):
                top = max(top, scores[j])
            total = q.dtype.type(0)  # sums stay in the arrays' dtype: float32 arithmetic vectorises twice as wide
            for j in range(visible):
                e = np.exp(scores[j] - top)
                scores[j] = e
                total += e
            inv = q.dtype.type(1) / total
            acc[:] = 0
            for j in range(visible):
                p = scores[j]
                for c in range(w):
                    acc[c] += p * v[h, j, c]
            for c in range(w):
                out[h, i, c] = acc[c] * inv
            lse[h, i] = top + np.log(total)


@kernel(parallel=True)
def attention_backward(q, k, v, lse, dout, scale, dq, dk, dv):
    """dq (n, Tq, w), dk and dv (n, Tk, w), overwritten; lse (n, Tq) from the forward."""
    n, tq, w = q.shape
    tk = k.shape[1]
    offset = tk - tq
    for h in prange(n):
        kt = np.ascontiguousarray(k[h].T)  # (w, Tk)
        vt = np.ascontiguousarray(v[h].T)  # (w, Tk)
        probs = np.empty(tk, dtype=q.dtype)  # one query's probabilities, then its dscores
        dprobs = np.empty(tk, dtype=q.dtype)
        acc = np.empty(w, dtype=q.dtype)
        dk[h] = 0
        dv[h] = 0
        for i in range(tq):
            visible = offset + i + 1
            probs[:visible] = 0
            dprobs[:visible] = 0
            for c in range(w):
                qc = q[h, i, c] * scale
                gc = dout[h, i, c]
                for j in range(visible):
                    probs[j] += qc * kt[c, j]
                    dprobs[j] += gc * vt[c, j]
            row_lse = lse[h, i]
            dot = q.dtype.type(0)  # sum_j p_j dP_j: softmax's backward subtracts it from every dP_j
            for j in range(visible):
                p = np.exp(probs[j] - row_lse)
                probs[j] = p
                dot += p * dprobs[j]
            acc[:] = 0
            for j in range(visible):
                p = probs[j]
                ds = p * (dprobs[j] - dot) * scale
                for c in range(w):
                    acc[c] += ds * k[h, j, c]
                    dk[h, j, c] += ds * q[h, i, c]
                    dv[h, j, c] += p * dout[h, i, c]
            for c in range(w):
                dq[h, i, c] = acc[c]
