"""Decoding attention over a KV cache's ring in one kernel: a few new queries, each over its own window.

`window_attention(q, keys, values, start, window, scale, out)`: q (G, n, w) holds G heads' queries at
positions start .. start + n - 1; keys and values (G, capacity, w) are the ring, position p in slot p %
capacity. Query i sees the positions from max(0, start + i - window + 1) to its own. For each head and query
it makes the scores in position order, shifts them by their max, exponentiates (`exp_into`), normalises and
sums the values, reading the ring's slots where they lie: no gather, no band mask, and one call for every
head group's queries, where the backend's default (backends/base.py) takes a copy and half a dozen ops. Each
query's result depends only on its own scores, so it is the same whether it comes alone or with drafts.
"""

from __future__ import annotations

import numpy as np

from microgpt.backends.cpu_kernels.fast_exp import exp_into
from microgpt.backends.cpu_kernels.jit import kernel


@kernel()
def window_attention(q, keys, values, start, window, scale, out):
    """out (G, n, w) = each query's softmax(q k^T * scale) v over the ring positions of its window."""
    heads, n, width = q.shape
    capacity = keys.shape[1]
    row = np.empty(window, dtype=q.dtype)  # one query's scores, then its probabilities
    scratch = np.empty(window, dtype=np.int32)  # for exp_into
    for g in range(heads):
        for i in range(n):
            position = start + i
            first = max(0, position - window + 1)
            seen = position - first + 1
            top = -np.inf
            for j in range(seen):
                slot = (first + j) % capacity
                total = q.dtype.type(0)
                for c in range(width):
                    total += q[g, i, c] * keys[g, slot, c]
                row[j] = total * scale
                top = max(top, row[j])
            for j in range(seen):
                row[j] -= top
            exp_into(row, seen, scratch)
            norm = q.dtype.type(0)
            for j in range(seen):
                norm += row[j]
            inv = q.dtype.type(1) / norm
            for c in range(width):
                out[g, i, c] = 0
            for j in range(seen):
                slot = (first + j) % capacity
                weight = row[j] * inv
                for c in range(width):
                    out[g, i, c] += weight * values[g, slot, c]
