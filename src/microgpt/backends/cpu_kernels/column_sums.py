"""Column sums of a (rows, cols) array (a bias gradient), one thread, in a fixed order: rows four at a time.

Adding four rows to the running sums in one pass loads and stores each sum once per four rows rather
than once per row, and keeps the order fixed. The backend hands arrays above BLAS_SIZE to BLAS instead (see CpuBackend.sum_rows).
"""

from __future__ import annotations

from microgpt.backends.cpu_kernels.jit import kernel

BLAS_SIZE = 1 << 19  # above this many entries, NumPy's product with ones (BLAS, every core) is faster


@kernel()
def column_sums(x, out):
    """out (1, cols) = the sum of x's rows: out += (x[r] + x[r+1]) + (x[r+2] + x[r+3]) for r = 0, 4, ..., then
    the last rows one at a time."""
    rows, cols = x.shape
    out[0, :] = 0
    r = 0
    while r + 4 <= rows:
        for c in range(cols):
            out[0, c] += (x[r, c] + x[r + 1, c]) + (x[r + 2, c] + x[r + 3, c])
        r += 4
    while r < rows:
        for c in range(cols):
            out[0, c] += x[r, c]
        r += 1
