"""The bfloat16 bits a kernel wrote beside its float32 output, kept for the matrix products that read it.

At --precision bf16 every product reads its inputs rounded to bfloat16 (backends/bf16.py). Where a kernel of
ours makes a product's input (LayerNorm, ReLU and its backward, attention's softmax and its backward), it writes
the rounding beside its float32 output while the values are at hand, and `RoundedOutputs` finds those bits again
when a product reads the output or a whole view of it (a reshape, its transpose): LayerNorm's output is read by
three products forward (q, k, v) and three backward (their weights' gradients), and rounded once.

Bits must never outlive the values they round. On the cpu backend a kept output is made read-only, so nothing
can change it under its bits; CuPy has no read-only arrays, so the cuda backend forgets an output's bits in every
op that writes into an array in place (`forget`). Either way, the bits go when the output does (a weak reference).
`KeepsRoundedOutputs` is the part both backends share.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np


class RoundedOutputs:
    """id(output) -> (a weak reference to it, its bits). protect: make a kept output read-only (NumPy arrays)."""

    def __init__(self, protect: bool):
        self._protect = protect
        self._kept: dict[int, tuple[weakref.ref, Any]] = {}

    def keep(self, out, bits) -> None:
        if self._protect:
            out.flags.writeable = False
        key, kept = id(out), self._kept
        kept[key] = (weakref.ref(out, lambda _, key=key: kept.pop(key, None)), bits)

    def find(self, x):
        """The bits of x (uint16, x's shape, a view) when x is a kept output or the whole of one, else None."""
        owner = x if id(x) in self._kept else x.base
        entry = self._kept.get(id(owner)) if owner is not None else None
        if entry is None or entry[0]() is not owner or x.size != owner.size:
            return None
        bits = entry[1]
        if x.flags.c_contiguous:  # the output itself, or a reshape of it
            return bits.reshape(x.shape)
        if x.ndim == 2 and x.T.flags.c_contiguous:  # its transpose (a weight gradient's x^T)
            return bits.reshape(x.T.shape).T
        return None

    def forget(self, x) -> None:
        """Drop the bits of x, or of the output x is a view of: x is about to be written in place."""
        for array in (x, getattr(x, "base", None)):
            if array is not None:
                self._kept.pop(id(array), None)


class KeepsRoundedOutputs:
    """Needs `precision`, `dtype`, `_rounded` (a RoundedOutputs), `_new_bits(shape)` (an uninitialised uint16
    array where the backend keeps its data) and `_round(x)` (x's bits, rounded now by the backend)."""

    def _bits(self, x):
        """x's bfloat16 bits as a product reads them (uint16, x's shape): those the kernel that made x wrote and
        kept, else rounded now."""
        found = self._rounded.find(x)
        return found if found is not None else self._round(x)

    def rounded_memory(self, elements):
        return elements * 2 // self.dtype.itemsize if self.precision == "bf16" else 0  # 2 bytes of bits each

    def _bits_for(self, x):
        """A new uint16 array of x's shape for a kernel to write x's bfloat16 rounding into, at bf16 (else None)."""
        return self._new_bits(x.shape) if self.precision == "bf16" and x.dtype == np.float32 else None

    def _keep_bits(self, out, bits):
        """out, with the bits its kernel wrote (None at fp32) kept for the products that read it."""
        if bits is not None:
            self._rounded.keep(out, bits)
        return out
