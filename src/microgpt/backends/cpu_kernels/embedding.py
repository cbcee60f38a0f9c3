"""Embedding gather, and a deterministic scatter-add of its gradient.

The scatter-add runs over positions in order: a repeated id accumulates in
position order every time, so the sums never depend on thread scheduling.
"""

from __future__ import annotations

from microgpt.backends.cpu_kernels.jit import kernel


@kernel()
def gather(table, ids, out):
    """out (len(ids), d) = table[ids, :d] where d = out.shape[1]."""
    positions, d = out.shape
    for p in range(positions):
        row = ids[p]
        for c in range(d):
            out[p, c] = table[row, c]


@kernel()
def scatter_add(grad, ids, table):
    """table[ids[p], :d] += grad[p, :d] for p in order, d = grad's used columns (table.shape[1] at most)."""
    positions = ids.shape[0]
    d = min(grad.shape[1], table.shape[1])
    for p in range(positions):
        row = ids[p]
        for c in range(d):
            table[row, c] += grad[p, c]
