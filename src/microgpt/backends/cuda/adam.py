"""The optimiser's updates on our kernels (elementwise.cu): the reference's Adam and our AdamW, each one
grid-stride launch over the whole flat parameter buffer.

`AdamKernels` is the mixin `CuBLASBackend` takes `adam_step` and `adamw_step`
from. The host folds each step's bias corrections into launch arguments.
"""

from __future__ import annotations

import numpy as np

from microgpt.backends.constants import ADAM_BETA1, ADAM_BETA2, ADAM_EPS


class AdamKernels:
    """Needs the array checks of `DeviceArrays` and the launches of `KernelLaunches`."""

    def adam_step(self, param, grad, m, v, lr, t):
        if t < 1:
            raise ValueError(f"adam_step: t counts from 1, got {t}")
        param = self._mat(param, "adam_step", in_place=True)
        grad = self._mat(grad, "adam_step")
        m, v = self._mat(m, "adam_step", in_place=True), self._mat(v, "adam_step", in_place=True)
        for other in (grad, m, v):
            self._same_shape("adam_step", param, other)
        self._per_element(
            "elementwise.cu", "adam_step", param.size, param, grad, m, v, np.int64(param.size),
            np.float32(ADAM_BETA1), np.float32(1 - ADAM_BETA1),
            np.float32(ADAM_BETA2), np.float32(1 - ADAM_BETA2),
            np.float32(ADAM_EPS), np.float32(lr / (1 - ADAM_BETA1**t)), np.float32(1 - ADAM_BETA2**t),
        )

    def adamw_step(self, param, grad, m, v, decay_mask, train_mask, lr, t, beta1, beta2, weight_decay, grad_scale):
        if t < 1:
            raise ValueError(f"adamw_step: t counts from 1, got {t}")
        param = self._mat(param, "adamw_step", in_place=True)
        grad, decay_mask, train_mask = (self._mat(a, "adamw_step") for a in (grad, decay_mask, train_mask))
        m, v = self._mat(m, "adamw_step", in_place=True), self._mat(v, "adamw_step", in_place=True)
        for other in (grad, m, v, decay_mask, train_mask):
            self._same_shape("adamw_step", param, other)
        self._per_element(
            "elementwise.cu", "adamw_step", param.size, param, grad, m, v, decay_mask, train_mask,
            np.int64(param.size),
            np.float32(grad_scale), np.float32(beta1), np.float32(1 - beta1), np.float32(beta2),
            np.float32(1 - beta2), np.float32(ADAM_EPS), np.float32(lr * weight_decay),
            np.float32(lr / (1 - beta1**t)), np.float32(1 - beta2**t),
        )
