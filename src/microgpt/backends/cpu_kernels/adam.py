"""Adam over the flat parameter store in one pass: each entry reads g, m, v, p once and writes m, v, p.

Element-wise, so the result is exact for any thread count. The host folds the bias
corrections into `step` = lr / (1 - beta1^t) and `v_scale` = 1 / (1 - beta2^t).
"""

from __future__ import annotations

import numpy as np

from microgpt.backends.cpu_kernels.jit import kernel


@kernel()
def adam(param, grad, m, v, beta1, keep1, beta2, keep2, eps, step, v_scale):
    """All arrays (1, total), updated in place; the scalars in the arrays' dtype, keep1 = 1 - beta1 and
    keep2 = 1 - beta2 rounded from float64 (1 - float32(0.9) would not be float32(0.1))."""
    total = param.shape[1]
    for i in range(total):
        g = grad[0, i]
        m_i = beta1 * m[0, i] + keep1 * g
        v_i = beta2 * v[0, i] + keep2 * (g * g)
        m[0, i] = m_i
        v[0, i] = v_i
        param[0, i] -= step * m_i / (np.sqrt(v_i * v_scale) + eps)


@kernel()
def adamw(param, grad, m, v, decay_mask, train_mask, beta1, keep1, beta2, keep2, eps, step, v_scale, decay,
          grad_scale):
    """AdamW (backends/adamw.py) in one pass, all arrays (1, total), param, m and v updated in place where
    train_mask is not 0 (a frozen entry's are not touched); grad is only read. decay = lr * weight_decay; the
    other scalars as for `adam`, in the arrays' dtype."""
    total = param.shape[1]
    one = param.dtype.type(1)
    for i in range(total):
        if train_mask[0, i] == 0:
            continue
        g = grad[0, i] * grad_scale
        m_i = beta1 * m[0, i] + keep1 * g
        v_i = beta2 * v[0, i] + keep2 * (g * g)
        m[0, i] = m_i
        v[0, i] = v_i
        p = param[0, i] * (one - decay * decay_mask[0, i])
        param[0, i] = p - step * m_i / (np.sqrt(v_i * v_scale) + eps)
