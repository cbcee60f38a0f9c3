"""Row softmaxes on our kernels: plain and fused with attention's scale and causal mask, their backwards,
the in-place causal masks (softmax.cu), and softmax + cross-entropy + its gradient in one launch (loss.cu).
At --precision bf16 attention's fused softmax and its backward also write their outputs' bfloat16 bits,
which the products that read them (the probabilities and their gradient) take (rounding.py); the plain
softmaxes (a distribution over the vocabulary, a masked attention's) keep none.

`SoftmaxKernels` is the mixin `CuBLASBackend` takes these ops from; each launches
one block per row (or, for the masks, a grid-stride loop over the elements).
"""

from __future__ import annotations

import numpy as np


class SoftmaxKernels:
    """Needs `_cp`, `dtype`, the array checks of `DeviceArrays` and the launches of `KernelLaunches`."""

    def softmax_rows(self, x):
        return self._softmax("softmax_rows", x, 1.0, attention=False)

    def fused_attn_softmax(self, scores, scale):
        return self._softmax("fused_attn_softmax", scores, scale, attention=True)

    def _softmax(self, op: str, x, scale: float, attention: bool):
        """attention: causal (stacked (T, T) blocks), and at bf16 the output's bits written and kept for the
        products that read the probabilities."""
        x = self._mat(x, op)
        out, bits = self._cp.empty_like(x), self._bits_for(x) if attention else None  # each (rows, cols)
        rows, cols = x.shape
        kernel, given = self._with_bits("softmax_rows", bits)
        self._per_row(
            "softmax.cu", kernel, x.shape, x, out, *given, np.int32(rows), np.int32(cols), np.float32(scale),
            np.int32(attention),
        )
        return self._keep_bits(out, bits)

    def softmax_backward(self, s, ds):
        return self._softmax_backward("softmax_backward", s, ds, 1.0, attention=False)

    def fused_attn_softmax_backward(self, s, ds, scale):
        return self._softmax_backward("fused_attn_softmax_backward", s, ds, scale, attention=True)

    def _softmax_backward(self, op: str, s, ds, scale: float, attention: bool):
        """attention: at bf16, the output's bits written and kept for the products that read the scores'
        gradient."""
        s, ds = self._mat(s, op), self._mat(ds, op)
        self._same_shape(op, s, ds)
        out, bits = self._cp.empty_like(s), self._bits_for(s) if attention else None  # each (rows, cols)
        rows, cols = s.shape
        kernel, given = self._with_bits("softmax_backward", bits)
        self._per_row(
            "softmax.cu", kernel, s.shape, s, ds, out, *given, np.int32(rows), np.int32(cols), np.float32(scale)
        )
        return self._keep_bits(out, bits)

    def causal_mask(self, scores):
        self._causal_mask("causal_mask", scores, None)

    def causal_mask_batched(self, scores, seq_len):
        if seq_len < 1:
            raise ValueError(f"causal_mask_batched: seq_len must be at least 1, got {seq_len}")
        self._causal_mask("causal_mask_batched", scores, seq_len)

    def _causal_mask(self, op: str, scores, period: int | None) -> None:
        """Row i is position i % period; period None means one block (position = row)."""
        scores = self._mat(scores, op, in_place=True)
        self._per_element(
            "softmax.cu", "causal_mask", scores.size, scores, np.int64(scores.size),
            np.int32(scores.shape[1]), np.int32(scores.shape[0] if period is None else period),
        )

    def fused_softmax_ce_grad(self, logits, targets):
        logits = self._mat(logits, "fused_softmax_ce_grad")
        rows, cols = logits.shape
        if rows == 0:
            raise ValueError("fused_softmax_ce_grad: no rows, so the mean loss is undefined")
        targets = self._device_ids(targets, "fused_softmax_ce_grad", rows)
        dlogits = self._cp.empty_like(logits)  # (rows, cols)
        row_losses = self._cp.empty(rows, dtype=self.dtype)  # (rows,)
        rows_done = self._cp.zeros(1, dtype=np.uint32)
        loss = self._cp.empty(1, dtype=self.dtype)
        self._per_row(
            "loss.cu", "softmax_ce_grad", logits.shape, logits, targets, dlogits, row_losses, rows_done, loss,
            np.int32(rows), np.int32(cols),
        )
        return float(self._download(loss)[0]), dlogits
