"""The draft heads of a lookahead model (mode mtp) run as one stack, for speculative decoding on a host backend.

Each head is `head_layers` blocks, a final LayerNorm and an output layer over the trunk's last states (heads.py).
Run one after another, a pass of speculative decoding pays every head's ops in turn. Here layer l of all K heads
runs as one: products batched over the heads' weights, stacked when the decoder is made; each LayerNorm's gain
and bias folded into the product after it (LN(x) W + b = norm(x) (gamma W) + (beta W + b)), so one normalisation
serves every head (the first, of the trunk's states, is the same for all of them); and at each layer one KV ring
per head group holding every head's attention heads. Only the last kept token's drafts are wanted, so the
last layer runs the other tokens only as far as their keys and values. A draft head's logits differ from its own forward in
rounding only (the folded products sum in another order). They need not be equal: a draft is only proposed,
and the sampler checks it against the main head, whose logits these do not touch.

The arrays are the backend's host (numpy) arrays, so this serves the numpy and cpu backends; a GPU backend runs
the heads one by one (speculative.py).
"""

from __future__ import annotations

import math

import numpy as np

from microgpt.model.attention import HeadGroup, head_groups
from microgpt.model.kv_cache import KVRing


def folded(norm, linears) -> tuple[np.ndarray, np.ndarray]:
    """(weights (d, out), bias (1, out)) of LayerNorm `norm` followed by the Linears side by side, its gain and
    bias folded in, in float64 on the host."""
    gamma, beta = (np.asarray(a, dtype=np.float64).reshape(-1) for a in (norm.gamma, norm.beta))  # (d,) each
    weights = np.concatenate([np.asarray(lin.w, dtype=np.float64) for lin in linears], axis=1)  # (d, out)
    bias = np.concatenate([np.asarray(lin.b, dtype=np.float64).reshape(-1) for lin in linears])  # (out,)
    return gamma[:, None] * weights, (beta @ weights + bias)[None, :]


def head_rows(part: np.ndarray, group: HeadGroup, offset: int) -> np.ndarray:
    """The group's columns from `offset` of part (K, rows, cols) as contiguous rows (K x heads x rows, w), ordered
    (head, row), as rope_apply and the rings take them."""
    count = part.shape[0]
    cols = part[:, :, offset + group.col : offset + group.end].reshape(count, -1, group.count, group.width)
    return np.ascontiguousarray(cols.transpose(0, 2, 1, 3)).reshape(-1, group.width)


class DraftStack:
    """Every draft head's layers as one, with its KV rings (`capacity` slots for a window of `window`)."""

    def __init__(self, model, capacity: int, window: int):
        be, config, heads = model.be, model.config, model.extra
        self.be, self.rope, self.width = be, model.rope, config.d_model
        dtype = be.dtype

        def stacked(parts) -> tuple[np.ndarray, np.ndarray]:  # (K, d, out), (K, 1, out)
            return (np.stack([w for w, _ in parts]).astype(dtype), np.stack([b for _, b in parts]).astype(dtype))

        self.layers = []
        for i in range(config.head_layers):
            blocks = [head.blocks[i] for head in heads]
            self.layers.append({
                "qkv": stacked([folded(b.ln1, (b.attn.wq, b.attn.wk, b.attn.wv)) for b in blocks]),
                "wo": stacked([(np.asarray(b.attn.wo.w), np.asarray(b.attn.wo.b).reshape(1, -1)) for b in blocks]),
                "ff1": stacked([folded(b.ln2, (b.ff.l1,)) for b in blocks]),
                "ff2": stacked([(np.asarray(b.ff.l2.w), np.asarray(b.ff.l2.b).reshape(1, -1)) for b in blocks])})
        self.out = stacked([folded(head.final_norm, (head.out,)) for head in heads])
        self.groups = head_groups(config.head_dims)
        count = len(heads)
        self.rings = [[KVRing(be, HeadGroup(g.col, count * g.count, g.width), capacity, window) for g in self.groups]
                      for _ in range(config.head_layers)]  # [layer][group]: every head's heads of the group
        self.unit = (np.ones((1, config.d_model), dtype=dtype), np.zeros((1, config.d_model), dtype=dtype))  # gamma, beta

    def normalize(self, x: np.ndarray) -> np.ndarray:
        """LayerNorm without gain or bias over the last axis of x (..., d)."""
        rows = np.ascontiguousarray(x).reshape(-1, self.width)  # (rows, d)
        return self.be.layer_norm_forward(rows, *self.unit)[0].reshape(x.shape)

    def forward(self, x: np.ndarray, start: int) -> np.ndarray:
        """The drafts' logits (K, vocab) after the last of the trunk's states x (n, d) of the tokens at positions
        start .. start + n - 1. Every head's keys and values of all n join its rings; below the last layer every
        row runs through, in the last only the last row's query and what follows it (the others' are not wanted)."""
        normed, stream = self.normalize(x), x[None]  # (n, d), and the residual stream (1 or K, n, d)
        for i, (layer, rings) in enumerate(zip(self.layers, self.rings)):
            last = i == len(self.layers) - 1
            weights, bias = layer["qkv"]
            qkv = np.matmul(normed, weights) + bias  # (K, n, 3d)
            attended = self.attend(qkv, rings, start, last)  # (K, n or 1, d)
            weights, bias = layer["wo"]
            stream = (stream[:, -1:] if last else stream) + (np.matmul(attended, weights) + bias)  # (K, n or 1, d)
            weights, bias = layer["ff1"]
            hidden = np.maximum(np.matmul(self.normalize(stream), weights) + bias, 0)  # (K, n or 1, d_ff)
            weights, bias = layer["ff2"]
            stream = stream + (np.matmul(hidden, weights) + bias)  # (K, n or 1, d)
            normed = self.normalize(stream)  # (K, n or 1, d)
        weights, bias = self.out
        return (np.matmul(normed[..., -1:, :], weights) + bias)[:, 0]  # (K, vocab)

    def attend(self, qkv: np.ndarray, rings: list[KVRing], start: int, last_only: bool) -> np.ndarray:
        """Every head's attention output (K, n, d), or (K, 1, d) for the last row alone, for its queries, keys and
        values side by side in qkv (K, n, 3d), each group's rows (K x heads, n, w) through one ring."""
        count, n, _ = qkv.shape
        d, queried = self.width, 1 if last_only else n
        mixed = np.empty((count, queried, d), dtype=qkv.dtype)  # (K, n or 1, d)
        for group, ring in zip(self.groups, rings):
            w, heads = group.width, count * group.count
            cos, sin = self.rope.tables(w, n, first_position=start)  # each (n, w)
            queries = head_rows(qkv[:, n - queried :], group, 0)
            keys, values = head_rows(qkv, group, d), head_rows(qkv, group, 2 * d)
            self.be.rope_apply(queries, cos[n - queried :], sin[n - queried :])
            self.be.rope_apply(keys, cos, sin)
            scale = 1.0 / math.sqrt(w)
            queries, keys, values = (a.reshape(heads, -1, w) for a in (queries, keys, values))
            out = (ring.attend_last(queries, keys, values, start, scale) if last_only else
                   ring.attend(queries, keys, values, start, scale))  # (K x heads, n or 1, w)
            mixed[:, :, group.col : group.end] = out.reshape(count, group.count, queried, w).transpose(
                0, 2, 1, 3).reshape(count, queried, group.count * w)
        return mixed
