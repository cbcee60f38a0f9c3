"""LayerNorm forward and backward, one pass over each row; dgamma and dbeta summed in row order."""

from __future__ import annotations

import numpy as np

from microgpt.backends.cpu_kernels.jit import kernel


@kernel()
def layer_norm_forward(x, gamma, beta, eps, out, norm, std_inv):
    """out and norm (rows, cols), std_inv (rows, 1), written; gamma and beta (1, cols); eps in x's dtype."""
    rows, cols = x.shape
    inv_cols = x.dtype.type(1) / x.dtype.type(cols)  # multiplying by it keeps the sums in x's dtype
    for r in range(rows):
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


@kernel()
def layer_norm_backward(grad, norm, std_inv, gamma, dx, dgamma, dbeta):
    """dx (rows, cols), dgamma and dbeta (1, cols), written:
    dx = std_inv * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)) with dnorm = grad * gamma."""
    rows, cols = grad.shape
    inv_cols = grad.dtype.type(1) / grad.dtype.type(cols)
    dgamma[0, :] = 0
    dbeta[0, :] = 0
    for r in range(rows):
        mean_d = grad.dtype.type(0)  # mean of dnorm
        mean_dn = grad.dtype.type(0)  # mean of dnorm * norm
        for c in range(cols):
            g = grad[r, c]
            d = g * gamma[0, c]
            mean_d += d
            mean_dn += d * norm[r, c]
            dgamma[0, c] += g * norm[r, c]
            dbeta[0, c] += g
        mean_d *= inv_cols
        mean_dn *= inv_cols
        inv = std_inv[r, 0]
        for c in range(cols):
            dx[r, c] = inv * (grad[r, c] * gamma[0, c] - mean_d - norm[r, c] * mean_dn)
