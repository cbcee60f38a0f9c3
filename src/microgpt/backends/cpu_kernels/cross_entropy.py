"""Softmax + cross-entropy + its gradient in one pass per row.

Rows in order; the loss is summed in float64. exp goes through `exp_into`,
which vectorises, after the row-max shift (so logits of any size stay finite).
The shift's max is a scalar loop (a running max is one long dependency chain), so
as in the NumPy backend it is skipped when the row is safely small: the square
root of its sum of squares (a vectorised loop) bounds every |logit|. A target
that is no column raises IndexError before it is read with (the backend then
names it).
"""

from __future__ import annotations

import numpy as np

from microgpt.backends.cpu_kernels.fast_exp import exp_into
from microgpt.backends.cpu_kernels.jit import kernel

EXP_SAFE = 60.0  # every |logit| below this: exp neither overflows nor underflows to 0, so no shift is needed


@kernel()
def softmax_ce_grad(logits, targets, dlogits):
    """dlogits (rows, vocab) = (softmax - onehot) / rows, written; returns the mean loss (float64)."""
    rows, cols = logits.shape
    if targets.shape[0] < rows or dlogits.shape[0] < rows or dlogits.shape[1] < cols:
        raise IndexError("softmax_ce_grad: fewer targets or dlogits than logits")
    scratch = np.empty(cols, dtype=np.int32)  # (cols,) for exp_into
    one = logits.dtype.type(1)
    n = logits.dtype.type(rows)
    loss = 0.0  # float64
    for r in range(rows):
        squares = logits.dtype.type(0)  # sqrt(squares) bounds every |logit| of the row
        for c in range(cols):
            squares += logits[r, c] * logits[r, c]
        top = logits.dtype.type(0)  # the shift: 0 when the logits are safely small, else the row's max
        if not squares < EXP_SAFE * EXP_SAFE:  # also taken for NaN
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
        if target < 0 or target >= cols:
            raise IndexError("softmax_ce_grad: a target is no column of the logits")
        loss += np.log(np.float64(total)) - (np.float64(logits[r, target]) - np.float64(top))
        weight = one / (total * n)
        for c in range(cols):
            row[c] *= weight
        row[target] -= one / n
    return loss / rows
