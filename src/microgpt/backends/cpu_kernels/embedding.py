"""Embedding gather, and a deterministic scatter-add of its gradient.

The scatter-add runs over positions in order: a repeated id accumulates in
position order every time, so the sums never depend on thread scheduling.
Neither reads or writes outside its arrays, whatever it is given: an id that is
no row of the table raises IndexError before it is read or written with (the
backend then names the id; the scatter-add checks them all before adding any),
and so do arrays of disagreeing lengths.
"""

from __future__ import annotations

from microgpt.backends.cpu_kernels.jit import kernel


@kernel()
def gather(table, ids, out):
    """out (len(ids), d) = table[ids, :d] where d = out.shape[1]."""
    positions, d = out.shape
    if ids.shape[0] != positions or d > table.shape[1]:
        raise IndexError("gather: out is not (len(ids), at most the table's width)")
    for p in range(positions):
        row = ids[p]
        if row < 0 or row >= table.shape[0]:
            raise IndexError("gather: a token id is no row of the table")
        for c in range(d):
            out[p, c] = table[row, c]


@kernel()
def scatter_add(grad, ids, table):
    """table[ids[p], :d] += grad[p, :d] for p in order, d = grad's used columns (table.shape[1] at most)."""
    positions = ids.shape[0]
    if grad.shape[0] < positions:
        raise IndexError("scatter_add: grad has fewer rows than ids")
    for p in range(positions):  # every id checked before the first is added: a refusal leaves table as it was
        if ids[p] < 0 or ids[p] >= table.shape[0]:
            raise IndexError("scatter_add: a token id is no row of the table")
    d = min(grad.shape[1], table.shape[1])
    for p in range(positions):
        row = ids[p]
        for c in range(d):
            table[row, c] += grad[p, c]
