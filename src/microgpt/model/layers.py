"""The simple layers: Linear, LayerNorm and the ReLU feed-forward.

Each layer is a forward/backward pair written against the backend contract.
`forward` returns its output and what backward needs; `backward` takes that,
adds the parameter gradients into their buffers, and returns the gradient of
its input.
"""

from __future__ import annotations

import math

from microgpt.backends.base import Backend
from microgpt.model.params import ParameterViews, ParamSpec


def linear_specs(name: str, d_in: int, d_out: int) -> list[ParamSpec]:
    """Weights (d_in, d_out) ~ N(0, 2/d_in), which weight decay applies to; bias zero."""
    return [ParamSpec(f"{name}.w", (d_in, d_out), math.sqrt(2.0 / d_in), decay=True),
            ParamSpec(f"{name}.b", (d_out,), 0.0)]


def layer_norm_specs(name: str, d: int) -> list[ParamSpec]:
    """gamma 1, beta 0."""
    return [ParamSpec(f"{name}.gamma", (d,), 0.0, 1.0), ParamSpec(f"{name}.beta", (d,), 0.0)]


class Linear:
    """y = x @ w + b."""

    def __init__(self, backend: Backend, params: ParameterViews, name: str):
        self.be = backend
        self.w, self.b = params.value[f"{name}.w"], params.value[f"{name}.b"]
        self.dw, self.db = params.gradient[f"{name}.w"], params.gradient[f"{name}.b"]

    def forward(self, x):
        y = self.be.matmul(x, self.w)  # (rows, d_out)
        self.be.bias_add(y, self.b)
        return y

    def backward(self, dy, x):
        """x is the forward input; returns dx."""
        self.be.matmul_into(x, dy, self.dw, transpose_a=True, accumulate=True)
        self.be.add_(self.db, self.be.sum_rows(dy))  # the column sums of dy: (1, d_out)
        dx = self.be.matmul(dy, self.w, transpose_b=True)  # (rows, d_in)
        return dx


class LayerNorm:
    def __init__(self, backend: Backend, params: ParameterViews, name: str):
        self.be = backend
        self.gamma, self.beta = params.value[f"{name}.gamma"], params.value[f"{name}.beta"]
        self.dgamma, self.dbeta = params.gradient[f"{name}.gamma"], params.gradient[f"{name}.beta"]

    def forward(self, x):
        out, norm, std_inv = self.be.layer_norm_forward(x, self.gamma, self.beta)  # (rows, d) x2, (rows, 1)
        return out, (norm, std_inv)

    def backward(self, dy, saved):
        norm, std_inv = saved
        dx, dgamma, dbeta = self.be.layer_norm_backward(dy, norm, std_inv, self.gamma)  # (rows, d), (1, d) x2
        self.be.add_(self.dgamma, dgamma)
        self.be.add_(self.dbeta, dbeta)
        return dx


class FeedForward:
    """Linear(d, d_ff) -> ReLU -> Linear(d_ff, d)."""

    def __init__(self, backend: Backend, params: ParameterViews, name: str):
        self.be = backend
        self.l1 = Linear(backend, params, f"{name}.l1")
        self.l2 = Linear(backend, params, f"{name}.l2")

    @staticmethod
    def specs(name: str, d_model: int, d_ff: int) -> list[ParamSpec]:
        return linear_specs(f"{name}.l1", d_model, d_ff) + linear_specs(f"{name}.l2", d_ff, d_model)

    def forward(self, x):
        pre_activation = self.be.matmul(x, self.l1.w)  # (rows, d_ff)
        hidden, mask = self.be.fused_bias_relu(pre_activation, self.l1.b)  # each (rows, d_ff)
        out = self.l2.forward(hidden)  # (rows, d_model)
        return out, (x, hidden, mask)

    def backward(self, dy, saved):
        x, hidden, mask = saved
        dhidden = self.l2.backward(dy, hidden)  # (rows, d_ff)
        dpre_activation = self.be.relu_backward(dhidden, mask)  # (rows, d_ff)
        dx = self.l1.backward(dpre_activation, x)  # (rows, d_model)
        return dx
