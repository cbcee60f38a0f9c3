"""The token embedding on our kernels (embedding.cu): the gather of the forward and the scatter-add of
the backward, where repeated ids accumulate.

`EmbeddingKernels` is the mixin `CuBLASBackend` takes these ops from. Ids may be
host arrays (uploaded) or already on the device (used as they are).
"""

from __future__ import annotations

import numpy as np


class EmbeddingKernels:
    """Needs `_cp`, `dtype`, the array checks of `DeviceArrays` and the launches of `KernelLaunches`."""

    def embedding_gather(self, token_emb, ids, seq_len, d_model):
        token_emb = self._mat(token_emb, "embedding_gather")
        if d_model > token_emb.shape[1]:
            raise ValueError(f"embedding_gather: d_model {d_model} is wider than the table {token_emb.shape}")
        ids = self._device_ids(ids, "embedding_gather", seq_len)
        out = self._cp.empty((seq_len, d_model), dtype=self.dtype)
        self._per_element(
            "embedding.cu", "embedding_gather", seq_len * d_model, token_emb, ids, out, np.int32(seq_len),
            np.int32(d_model), np.int32(token_emb.shape[0]), np.int32(token_emb.shape[1]),
        )
        return out

    def embedding_scatter_add(self, grad, ids, d_token_emb, seq_len, d_model):
        op = "embedding_scatter_add"
        grad = self._mat(grad, op)
        d_token_emb = self._mat(d_token_emb, op, in_place=True)
        if grad.shape[0] < seq_len or grad.shape[1] < d_model or d_token_emb.shape[1] < d_model:
            raise ValueError(
                f"{op}: grad {grad.shape} and table {d_token_emb.shape} must cover "
                f"seq_len {seq_len} x d_model {d_model}"
            )
        ids = self._device_ids(ids, op, seq_len)
        self._per_element(  # one thread per table cell (see embedding.cu)
            "embedding.cu", "embedding_scatter_add", d_token_emb.shape[0] * d_model, grad, ids, d_token_emb,
            np.int32(seq_len),
            np.int32(d_model), np.int32(grad.shape[1]), np.int32(d_token_emb.shape[0]),
            np.int32(d_token_emb.shape[1]),
        )
