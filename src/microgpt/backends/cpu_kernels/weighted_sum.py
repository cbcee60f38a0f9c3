"""dst += a weighted sum of rows, over one range of columns: the gradients of a batch's slices combined into one.

Each column adds its sources in their order (row 0 first), so the result does not depend on how the
columns are split over threads. The columns go in blocks small enough to stay in the first-level cache
while every source is added to them.
"""

from __future__ import annotations

from microgpt.backends.cpu_kernels.jit import kernel

BLOCK = 2048  # columns per block: dst's block and one source's stay in L1 (16 KiB of float32)


@kernel()
def add_weighted(dst, sources, weights, start, end):
    """dst[0, j] += weights[0] * sources[0, j] + weights[1] * sources[1, j] + ... (added in that order) for
    start <= j < end; dst (1, n), sources (k, n), weights (k,) in the arrays' dtype."""
    for block in range(start, end, BLOCK):
        stop = min(block + BLOCK, end)
        for i in range(sources.shape[0]):
            weight = weights[i]
            for j in range(block, stop):
                dst[0, j] += weight * sources[i, j]
