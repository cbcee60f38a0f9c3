"""Softmax + cross-entropy + its gradient in one pass per row.

Each row's loss goes to its own slot; the mean is then summed in row order in
float64, so the loss does not depend on the thread count. exp is taken after the
row-max shift, so logits of any size stay finite.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from microgpt.backends.cpu_kernels.jit import kernel


@kernel(parallel=True)
def softmax_ce_grad(logits, targets, dlogits):
    """dlogits (rows, vocab) = (softmax - onehot) / rows, written; returns the mean loss (float64)."""
    rows, cols = logits.shape
    losses = np.empty(rows, dtype=np.float64)  # (rows,)
    one = logits.dtype.type(1)
    n = logits.dtype.type(rows)
    for r in prange(rows):
        top = logits[r, 0]
        for c in range(1, cols):
            top = max(top, logits[r, c])
        total = logits.dtype.type(0)
        for c in range(cols):
            e = np.exp(logits[r, c] - top)
            dlogits[r, c] = e
            total += e
        target = targets[r]
        losses[r] = np.log(np.float64(total)) - (np.float64(logits[r, target]) - np.float64(top))
        weight = one / (total * n)
        for c in range(cols):
            dlogits[r, c] *= weight
        dlogits[r, target] -= one / n
    mean = 0.0
    for r in range(rows):
        mean += losses[r]
    return mean / rows
