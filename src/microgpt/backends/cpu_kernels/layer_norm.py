"""LayerNorm forward and backward, one pass per row; the (1, cols) parameter gradients in fixed row chunks.

Rows are independent, so the forward and dx are a parallel loop over rows. dgamma
and dbeta are column sums over every row: each chunk of CHUNK_ROWS rows (a fixed
size, not one per thread) sums its own partial row in order, then the partials are
added chunk by chunk, so the result is the same for any thread count.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from microgpt.backends.cpu_kernels.jit import kernel
from microgpt.backends.cpu_kernels.column_sums import CHUNK_ROWS


@kernel(parallel=True)
def layer_norm_forward(x, gamma, beta, eps, out, norm, std_inv):
    """out and norm (rows, cols), std_inv (rows, 1), written; gamma and beta (1, cols); eps in x's dtype."""
    rows, cols = x.shape
    inv_cols = x.dtype.type(1) / x.dtype.type(cols)  # multiplying by it keeps the sums in x's dtype
    for r in prange(rows):
        total = x.dtype.type(0)
        for c in range(cols):
            total += x[r, c]
        mean = total * inv_cols
        squares = x.dtype.type(0)
        for c in range(cols):
            centred = x[r, c] - mean
            squares += centred * centred
        inv = x.dtype.type(1) / np.sqrt(squares * inv_cols + eps)
        std_inv[r, 0] = inv
        for c in range(cols):
            value = (x[r, c] - mean) * inv
            norm[r, c] = value
            out[r, c] = value * gamma[0, c] + beta[0, c]


@kernel(parallel=True)
def layer_norm_backward(grad, norm, std_inv, gamma, dx, dgamma, dbeta):
    """dx (rows, cols), dgamma and dbeta (1, cols), written."""
    rows, cols = grad.shape
    inv_cols = grad.dtype.type(1) / grad.dtype.type(cols)
    chunks = (rows + CHUNK_ROWS - 1) // CHUNK_ROWS
    partial_gamma = np.zeros((chunks, cols), dtype=grad.dtype)  # (chunks, cols)
    partial_beta = np.zeros((chunks, cols), dtype=grad.dtype)  # (chunks, cols)
    for chunk in prange(chunks):
        for r in range(chunk * CHUNK_ROWS, min(rows, (chunk + 1) * CHUNK_ROWS)):
            mean_d = grad.dtype.type(0)  # mean of dnorm = grad * gamma
            mean_dn = grad.dtype.type(0)  # mean of dnorm * norm
            for c in range(cols):
                g = grad[r, c]
                d = g * gamma[0, c]
                mean_d += d
                mean_dn += d * norm[r, c]
                partial_gamma[chunk, c] += g * norm[r, c]
                partial_beta[chunk, c] += g
            mean_d *= inv_cols
            mean_dn *= inv_cols
            inv = std_inv[r, 0]
            for c in range(cols):
                dx[r, c] = inv * (grad[r, c] * gamma[0, c] - mean_d - norm[r, c] * mean_dn)
    dgamma[0, :] = 0
    dbeta[0, :] = 0
    for chunk in range(chunks):
        for c in range(cols):
            dgamma[0, c] += partial_gamma[chunk, c]
            dbeta[0, c] += partial_beta[chunk, c]
