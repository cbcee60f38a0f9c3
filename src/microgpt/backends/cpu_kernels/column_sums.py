"""Column sums of a (rows, cols) array (a bias gradient), the same for any thread count.

Each chunk of CHUNK_ROWS rows sums its rows in order into a partial row; the
partials are then added in chunk order. The chunk size is fixed, so the order of
every addition is too.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from microgpt.backends.cpu_kernels.jit import kernel

CHUNK_ROWS = 64  # rows per partial sum: 2048 rows make 32 tasks for the threads to share


@kernel(parallel=True)
def column_sums(x, out):
    """out (1, cols) = the sum of x's rows."""
    rows, cols = x.shape
    chunks = (rows + CHUNK_ROWS - 1) // CHUNK_ROWS
    partial = np.zeros((chunks, cols), dtype=x.dtype)  # (chunks, cols)
    for chunk in prange(chunks):
        for r in range(chunk * CHUNK_ROWS, min(rows, (chunk + 1) * CHUNK_ROWS)):
            for c in range(cols):
                partial[chunk, c] += x[r, c]
    out[0, :] = 0
    for chunk in range(chunks):
        for c in range(cols):
            out[0, c] += partial[chunk, c]
