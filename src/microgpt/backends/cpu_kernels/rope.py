"""Rotary embedding in place, and its inverse (sign -1), row by row.

x (rows, dim); the caches (n, dim) hold each pair's cos and sin in both of its
columns; row r uses cache row r % n. Pair (x0, x1) turns to
(x0 c - sign x1 s, sign x0 s + x1 c); an odd last column is left as it is.
"""

from __future__ import annotations

from microgpt.backends.cpu_kernels.jit import kernel


@kernel()
def rope(x, cos_cache, sin_cache, sign):
    rows, dim = x.shape
    n = cos_cache.shape[0]
    for r in range(rows):
        p = r % n
        for pair in range(dim // 2):
            c = cos_cache[p, 2 * pair]
            s = sin_cache[p, 2 * pair] * sign
            x0 = x[r, 2 * pair]
            x1 = x[r, 2 * pair + 1]
            x[r, 2 * pair] = x0 * c - x1 * s
            x[r, 2 * pair + 1] = x0 * s + x1 * c
