"""Bias + ReLU forward in one pass, and ReLU's backward (element-wise, one thread)."""

from __future__ import annotations

from microgpt.backends.cpu_kernels.jit import kernel


@kernel()
def bias_relu_forward(x, bias, out, mask):
    """x += bias in place (as the contract's fused op does); out = max(x, 0); mask = 1.0 where x > 0 else 0.0."""
    rows, cols = x.shape
    zero = x.dtype.type(0)
    one = x.dtype.type(1)
    for r in range(rows):
        for c in range(cols):
            value = x[r, c] + bias[0, c]
            x[r, c] = value
            positive = value > zero
            out[r, c] = value if positive else zero
            mask[r, c] = one if positive else zero


@kernel()
def relu_backward(grad, mask, out):
    """out = grad * mask."""
    rows, cols = grad.shape
    for r in range(rows):
        for c in range(cols):
            out[r, c] = grad[r, c] * mask[r, c]
