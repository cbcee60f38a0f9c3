"""AdamW over a flat parameter store, in NumPy: the math of `Backend.adamw_step`, written once.

For each element i that trains (all arrays (1, total); param, m and v updated in place):

    g     = grad[i] * grad_scale                       (grad_scale < 1 when the global norm was clipped)
    m[i]  = beta1 * m[i] + (1 - beta1) * g
    v[i]  = beta2 * v[i] + (1 - beta2) * g * g
    p[i] *= 1 - lr * weight_decay * decay_mask[i]      (decoupled decay, before the Adam step)
    p[i] -= lr / (1 - beta1**t) * m[i] / (sqrt(v[i] / (1 - beta2**t)) + ADAM_EPS)

which is torch.optim.AdamW's update (decay_mask 1 on the tensors of its decayed
group, 0 elsewhere). An element whose train_mask is 0 is frozen: its p, m and v
are left exactly as they were, whatever its gradient. `grad` itself is left as
it was. The NumPy backend runs it on its own arrays; `Backend`'s default runs it
on host copies of any backend's.
"""

from __future__ import annotations

import numpy as np

from microgpt.backends.constants import ADAM_EPS


def adamw_update(param: np.ndarray, grad: np.ndarray, m: np.ndarray, v: np.ndarray, decay_mask: np.ndarray,
                 train_mask: np.ndarray, lr: float, t: int, beta1: float, beta2: float, weight_decay: float,
                 grad_scale: float) -> None:
    """In place on NumPy arrays of one dtype, all (1, total): the update above. Each line computes its formula
    for every entry and writes it (`out=..., where=trains`) only where the entry trains."""
    kind = param.dtype.type
    trains = train_mask != 0  # (1, total)
    g = grad * kind(grad_scale)  # (1, total)
    np.add(kind(beta1) * m, kind(1 - beta1) * g, out=m, where=trains)
    np.add(kind(beta2) * v, kind(1 - beta2) * (g * g), out=v, where=trains)
    if weight_decay:
        np.multiply(param, 1 - kind(lr * weight_decay) * decay_mask, out=param, where=trains)
    update = kind(lr / (1 - beta1**t)) * m / (np.sqrt(v / kind(1 - beta2**t)) + kind(ADAM_EPS))  # (1, total)
    np.subtract(param, update, out=param, where=trains)
