"""Bias + ReLU forward in one pass, and ReLU's backward (element-wise, one thread); at --precision bf16 each
also writes its result's bfloat16 bits (`bits`), the input of the products that follow."""

from __future__ import annotations

from microgpt.backends.cpu_kernels.bf16 import round_row
from microgpt.backends.cpu_kernels.jit import kernel


@kernel()
def bias_relu_forward(x, bias, out, mask, bits=None):
    """x += bias in place (as the contract's fused op does); out = max(x, 0); mask = 1.0 where x > 0 else 0.0;
    bits (uint16, out's shape; float32 only) = out rounded to bfloat16 where given."""
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
        if bits is not None:
            round_row(out[r], bits[r])


@kernel()
def relu_backward(grad, mask, out, bits=None):
    """out = grad * mask; bits = out rounded to bfloat16 where given (as bias_relu_forward)."""
    rows, cols = grad.shape
    for r in range(rows):
        for c in range(cols):
            out[r, c] = grad[r, c] * mask[r, c]
        if bits is not None:
            round_row(out[r], bits[r])
