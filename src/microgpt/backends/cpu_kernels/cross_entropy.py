"""Softmax + cross-entropy + its gradient in one pass per row.

Rows in order; the loss is summed in float64. exp is taken after the row-max
shift (so logits of any size stay finite) through `exp_into`, which vectorises.
"""

from __future__ import annotations

import numpy as np

from microgpt.backends.cpu_kernels.fast_exp import exp_into
from microgpt.backends.cpu_kernels.jit import kernel


@kernel()
def softmax_ce_grad(logits, targets, dlogits):
    """dlogits (rows, vocab) = (softmax - onehot) / rows, written; returns the mean loss (float64)."""
    rows, cols = logits.shape
    scratch = np.empty(cols, dtype=np.int32)  # (cols,) for exp_into
    one = logits.dtype.type(1)
    n = logits.dtype.type(rows)
    loss = 0.0  # float64
    for r in range(rows):
        top = logits[r, 0]
        for c in range(1, cols):
            top = max(top, logits[r, c])
        row = dlogits[r]  # a view: the exps, then the gradient
        for c in range(cols):
            row[c] = logits[r, c] - top
        exp_into(row, cols, scratch)
        total = logits.dtype.type(0)
        for c in range(cols):
            total += row[c]
        target = targets[r]
        loss += np.log(np.float64(total)) - (np.float64(logits[r, target]) - np.float64(top))
        weight = one / (total * n)
        for c in range(cols):
            row[c] *= weight
        row[target] -= one / n
    return loss / rows
