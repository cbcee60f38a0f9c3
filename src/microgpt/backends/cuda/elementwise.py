"""Element-wise ops on our kernels: bias add and ReLU (plain, backward, fused with the bias;
elementwise.cu) and the rotary embedding and its inverse (rope.cu). At --precision bf16 the ReLUs'
kernels also write their outputs' bfloat16 bits, which the products that read them take (rounding.py).

`ElementwiseKernels` is the mixin `CuBLASBackend` takes these ops from; each is a
grid-stride loop over the elements (`KernelLaunches._per_element`).
"""

from __future__ import annotations

import numpy as np


class ElementwiseKernels:
    """Needs `_cp`, the array checks of `DeviceArrays` and the launches of `KernelLaunches`."""

    def bias_add(self, data, bias):
        data = self._mat(data, "bias_add", in_place=True)
        bias = self._row_vector("bias_add", "bias", bias, data.shape[1])
        self._per_element(
            "elementwise.cu", "bias_add", data.size, data, bias, np.int64(data.size), np.int32(data.shape[1])
        )

    def relu_forward(self, x):
        x = self._mat(x, "relu_forward")
        out, mask, bits = self._cp.empty_like(x), self._cp.empty_like(x), self._bits_for(x)  # each (rows, cols)
        kernel, given = self._with_bits("relu_forward", bits)
        self._per_element("elementwise.cu", kernel, x.size, x, out, mask, *given, np.int64(x.size))
        return self._keep_bits(out, bits), mask

    def relu_backward(self, grad, mask):
        grad, mask = self._mat(grad, "relu_backward"), self._mat(mask, "relu_backward")
        self._same_shape("relu_backward", grad, mask)
        out, bits = self._cp.empty_like(grad), self._bits_for(grad)  # each (rows, cols)
        kernel, given = self._with_bits("relu_backward", bits)
        self._per_element("elementwise.cu", kernel, grad.size, grad, mask, out, *given, np.int64(grad.size))
        return self._keep_bits(out, bits)

    def fused_bias_relu(self, x, bias):
        x = self._mat(x, "fused_bias_relu", in_place=True)
        bias = self._row_vector("fused_bias_relu", "bias", bias, x.shape[1])
        out, mask, bits = self._cp.empty_like(x), self._cp.empty_like(x), self._bits_for(x)  # each (rows, cols)
        kernel, given = self._with_bits("bias_relu", bits)
        self._per_element(
            "elementwise.cu", kernel, x.size, x, bias, out, mask, *given, np.int64(x.size), np.int32(x.shape[1])
        )
        return self._keep_bits(out, bits), mask

    def rope_apply(self, x, cos_cache, sin_cache):
        self._rope("rope_apply", x, cos_cache, sin_cache, 1.0)

    def rope_apply_inverse(self, x, cos_cache, sin_cache):
        self._rope("rope_apply_inverse", x, cos_cache, sin_cache, -1.0)

    def _rope(self, op: str, x, cos_cache, sin_cache, sign: float) -> None:
        x = self._mat(x, op, in_place=True)
        cos_cache, sin_cache = self._mat(cos_cache, op), self._mat(sin_cache, op)
        self._same_shape(op, cos_cache, sin_cache)
        rows, dim = x.shape
        cache_rows, cache_cols = cos_cache.shape
        if cache_rows == 0 or cache_cols < dim - dim % 2:
            raise ValueError(
                f"{op}: caches {cos_cache.shape} need at least one row and {dim} columns for x {x.shape}"
            )
        self._per_element(
            "rope.cu", "rope_rotate", rows * (dim // 2), x, cos_cache, sin_cache,
            np.int32(rows), np.int32(dim),
            np.int32(cache_rows), np.int32(cache_cols), np.float32(sign),
        )
