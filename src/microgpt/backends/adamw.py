"""AdamW over a flat parameter store, in NumPy: the math of `Backend.adamw_step`, written once.

For each element i (all arrays (1, total), updated in place):

    g     = grad[i] * grad_scale                       (grad_scale < 1 when the global norm was clipped)
    m[i]  = beta1 * m[i] + (1 - beta1) * g
    v[i]  = beta2 * v[i] + (1 - beta2) * g * g
    p[i] *= 1 - lr * weight_decay * decay_mask[i]      (decoupled decay, before the Adam step)
    p[i] -= lr / (1 - beta1**t) * m[i] / (sqrt(v[i] / (1 - beta2**t)) + ADAM_EPS)

which is torch.optim.AdamW's update (decay_mask 1 on the tensors of its decayed
group, 0 elsewhere). `grad` itself is left as it was. The NumPy backend runs it
on its own arrays; `Backend`'s default runs it on host copies of any backend's.
"""

from __future__ import annotations

import numpy as np

from microgpt.backends.constants import ADAM_EPS


def adamw_update(param: np.ndarray, grad: np.ndarray, m: np.ndarray, v: np.ndarray, decay_mask: np.ndarray,
                 lr: float, t: int, beta1: float, beta2: float, weight_decay: float, grad_scale: float) -> None:
    """In place on NumPy arrays of one dtype, all (1, total): the update above."""
    kind = param.dtype.type
    g = grad * kind(grad_scale) if grad_scale != 1.0 else grad  # (1, total)
    m *= kind(beta1)
    m += kind(1 - beta1) * g
    v *= kind(beta2)
    v += kind(1 - beta2) * (g * g)
    if weight_decay:
        param *= 1 - kind(lr * weight_decay) * decay_mask
    denom = np.sqrt(v / kind(1 - beta2**t))  # (1, total)
    denom += kind(ADAM_EPS)
    param -= kind(lr / (1 - beta1**t)) * m / denom
