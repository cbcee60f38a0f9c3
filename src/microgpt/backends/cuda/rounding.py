"""The bfloat16 bits the products read at --precision bf16: those a kernel wrote beside its output, else rounded.

`RoundsInputs` is the mixin `CuBLASBackend`'s products (gemm.py) take `_bits` from. LayerNorm, the ReLUs and
attention's softmax and its backward write their output's bits in the same launch (each kernel's `_bf16` twin)
and keep them (backends/rounded_outputs.py), so LayerNorm's output, read by six products a step, is rounded
once and read as 2-byte words thereafter; any other input (a weight, q and k, a residual gradient) is rounded by
`round_bf16` (elementwise.cu) into new words as a product reads it. CuPy arrays cannot be made read-only, so
every op that writes an array in place forgets its bits first (`DeviceArrays`).
"""

from __future__ import annotations

import numpy as np

from microgpt.backends.rounded_outputs import KeepsRoundedOutputs


class RoundsInputs(KeepsRoundedOutputs):
    """Needs `_cp`, `precision`, `dtype`, `_rounded` and the launches of `KernelLaunches`; its `_bits` (which
    gemm.py reads) is KeepsRoundedOutputs'."""

    def _new_bits(self, shape):
        return self._cp.empty(shape, dtype=np.uint16)

    def _round(self, x):
        """x's bfloat16 bits in a new uint16 array of its shape, rounded by `round_bf16` (x is contiguous)."""
        bits = self._new_bits(x.shape)
        self._per_element("elementwise.cu", "round_bf16", x.size, x, bits, np.int64(x.size))
        return bits

    @staticmethod
    def _with_bits(kernel: str, bits) -> tuple[str, tuple]:
        """(kernel name, its bits argument): the `_bf16` twin that also writes its output's bits, and (bits,),
        when bits is an array (`_bits_for` at bf16); the float32 kernel and () when it is None."""
        return (kernel, ()) if bits is None else (f"{kernel}_bf16", (bits,))
