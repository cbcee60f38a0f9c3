"""Column sums of a (rows, cols) array (a bias gradient): rows added in order, one thread."""

from __future__ import annotations

from microgpt.backends.cpu_kernels.jit import kernel


@kernel()
def column_sums(x, out):
    """out (1, cols) = the sum of x's rows, row 0 first."""
    rows, cols = x.shape
    out[0, :] = 0
    for r in range(rows):
        for c in range(cols):
            out[0, c] += x[r, c]
