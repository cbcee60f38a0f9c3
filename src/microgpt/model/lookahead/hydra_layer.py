"""A hydra head's layer: a feed-forward over the head's running state and the embeddings of the tokens after it.

Hydra head k at position t reads the trunk's state at t and the token embeddings e_1 .. e_k of the tokens at
t + 1 .. t + k (Ankner et al. 2024, "Hydra: Sequentially-Dependent Draft Heads for Medusa Decoding"). Each of
its layers is a residual feed-forward whose first product takes the state's LayerNorm and the embeddings side
by side, written as a sum of products so that no concatenation is needed:

    x + W2 relu(LN(x) W_x + e_1 W_1 + ... + e_k W_k + b1) + b2

Nothing mixes positions: row t holds the state at t and the tokens t + 1 .. t + k, never the token at t + 1 + k
that the head predicts.
"""

from __future__ import annotations

import math

from microgpt.backends.base import Backend
from microgpt.model.params import ParameterViews, ParamSpec
from microgpt.model.transformer import LayerNorm, Linear, layer_norm_specs, linear_specs


def hydra_layer_specs(name: str, d_model: int, d_ff: int, k: int) -> list[ParamSpec]:
    """A hydra layer's parameters, in checkpoint order. The first product's weights are drawn as one Linear's over
    the (k + 1) x d_model inputs side by side would be (N(0, 2 / fan-in)); the state's carries its bias."""
    std = math.sqrt(2.0 / ((k + 1) * d_model))
    state = [ParamSpec(f"{name}.state.w", (d_model, d_ff), std, decay=True), ParamSpec(f"{name}.state.b", (d_ff,), 0.0)]
    tokens = [ParamSpec(f"{name}.token{j}.w", (d_model, d_ff), std, decay=True) for j in range(1, k + 1)]
    return layer_norm_specs(f"{name}.ln", d_model) + state + tokens + linear_specs(f"{name}.out", d_ff, d_model)


class HydraLayer:
    """x + W2 relu(LN(x) W_x + sum_j e_j W_j + b1) + b2 over rows of states x and k token embeddings."""

    def __init__(self, backend: Backend, params: ParameterViews, name: str, k: int):
        self.be, self.k = backend, k
        self.ln = LayerNorm(backend, params, f"{name}.ln")
        self.state = Linear(backend, params, f"{name}.state")
        self.tokens = [(params.value[f"{name}.token{j}.w"], params.gradient[f"{name}.token{j}.w"])
                       for j in range(1, k + 1)]
        self.out = Linear(backend, params, f"{name}.out")

    def forward(self, x, embeddings):
        """(x', saved) for states x (rows, d) and the k token embeddings, each (rows, d), e_1 first."""
        be = self.be
        normed, norm_saved = self.ln.forward(x)  # (rows, d)
        pre = be.matmul(normed, self.state.w)  # (rows, d_ff)
        for e, (w, _) in zip(embeddings, self.tokens):
            be.matmul_into(e, w, pre, accumulate=True)
        hidden, mask = be.fused_bias_relu(pre, self.state.b)  # each (rows, d_ff)
        return be.add(x, self.out.forward(hidden)), (normed, norm_saved, embeddings, hidden, mask)

    def backward(self, dy, saved):
        """(dx (rows, d), [de_j (rows, d)]): the gradients of the states and of each token embedding."""
        be = self.be
        normed, norm_saved, embeddings, hidden, mask = saved
        dpre = be.relu_backward(self.out.backward(dy, hidden), mask)  # (rows, d_ff)
        dx = be.add(dy, self.ln.backward(self.state.backward(dpre, normed), norm_saved))  # (rows, d)
        dembeddings = []
        for e, (w, dw) in zip(embeddings, self.tokens):
            be.matmul_into(e, dpre, dw, transpose_a=True, accumulate=True)
            dembeddings.append(be.matmul(dpre, w, transpose_b=True))  # (rows, d)
        return dx, dembeddings
