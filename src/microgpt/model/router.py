"""The router: per position, the weights that mix experts' logits (the ensemble family's, and the graph's `router`
op, which both call this).

From a feature f[t] of positions <= t, z = f @ W + b, p = softmax(z), and w = (1 - e) p + e / n, so every
expert keeps a floor of e / n (--router-epsilon). W and b start at zero: uniform weights at first. The
features:
- `global`: the mean of the final stream over positions <= t (the original averages the whole window, so its
  weights at t depend on tokens after t; this one does not);
- `context`: a running sum of the router's own token embeddings, c[t] = c[t-1] + E[x_t];
- `gated`: the same with a learned reset, c[t] = g_t c[t-1] + E[x_t], g_t = sigmoid(E[x_t] . u + c0).

The router is small (features of width B, n experts), so it runs on the host in NumPy in the backend's
dtype, reading its parameters from the backend and adding its gradients back; the experts and the mixing stay
on the backend.
"""

from __future__ import annotations

import numpy as np

from microgpt.model.params import ParameterViews, ParamSpec

KINDS = ("global", "context", "gated")
EMB_STD, GATE_STD = 0.1, 0.1  # the context and gated routers' embeddings and gate vector


def router_specs(kind: str, experts: int, width: int, vocab: int, prefix: str = "router") -> list[ParamSpec]:
    """The router's parameters, named `prefix`.w and so on, in the order they are drawn."""
    specs = [ParamSpec(f"{prefix}.w", (width, experts), 0.0, decay=True), ParamSpec(f"{prefix}.b", (experts,), 0.0)]
    if kind in ("context", "gated"):
        specs.insert(0, ParamSpec(f"{prefix}.emb", (vocab, width), EMB_STD))
    if kind == "gated":
        specs += [ParamSpec(f"{prefix}.gate.w", (width,), GATE_STD), ParamSpec(f"{prefix}.gate.b", (1,), 0.0)]
    return specs


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _reverse_cumsum(x: np.ndarray) -> np.ndarray:
    """out[:, t] = sum over u >= t of x[:, u] (along axis 1)."""
    return np.flip(np.flip(x, axis=1).cumsum(axis=1), axis=1)


class Router:
    """Forward and backward of the mixing weights, bound to one set of gradient buffers."""

    def __init__(self, backend, views: ParameterViews, kind: str, experts: int, epsilon: float,
                 prefix: str = "router"):
        self.be, self.views, self.kind, self.n, self.epsilon = backend, views, kind, experts, epsilon
        self.prefix = prefix

    def _param(self, short: str) -> np.ndarray:
        value = self.views.value[f"{self.prefix}.{short}"]
        return self.be.to_host(value).reshape(value.shape)

    def _add_grad(self, short: str, grad: np.ndarray) -> None:
        target = self.views.gradient[f"{self.prefix}.{short}"]
        self.be.add_(target, self.be.from_host(grad.reshape(target.shape).astype(self.be.dtype)))

    def forward(self, ids_host: np.ndarray, stream) -> tuple[np.ndarray, tuple]:
        """(weights (B*T, n) on the host, what backward needs) for host ids (B, T) and the final stream
        (B*T, width) on the backend."""
        batch, seq_len = ids_host.shape
        gate = None
        if self.kind == "global":
            final = self.be.to_host(stream).reshape(batch, seq_len, -1)  # (B, T, width)
            feature = final.cumsum(axis=1) / np.arange(1, seq_len + 1, dtype=final.dtype)[None, :, None]
        else:
            embedded = self._param("emb")[ids_host]  # (B, T, width)
            if self.kind == "context":
                feature = embedded.cumsum(axis=1)
            else:
                gate = 1.0 / (1.0 + np.exp(-(embedded @ self._param("gate.w")[0]
                                              + self._param("gate.b")[0, 0])))  # (B, T)
                feature = np.empty_like(embedded)  # (B, T, width)
                feature[:, 0] = embedded[:, 0]
                for t in range(1, seq_len):
                    feature[:, t] = gate[:, t, None] * feature[:, t - 1] + embedded[:, t]
        feature = feature.reshape(batch * seq_len, -1)  # (B*T, width)
        p = _softmax(feature @ self._param("w") + self._param("b")[0])  # (B*T, n)
        weights = (1 - self.epsilon) * p + self.epsilon / self.n
        return weights.astype(self.be.dtype), (ids_host, feature, p, gate)

    def running(self, ids_new: np.ndarray, final_rows, state):
        """(weights (n, experts), the new state) for n new tokens of one sequence, carrying the feature on from
        `state` (None at position 0): the stream's running sum and count (`global`), or the running sum of
        embeddings (`context`, `gated`); final_rows (n, width) is the final stream's new rows on the backend."""
        rows = []
        if self.kind == "global":
            total, count = state if state is not None else (0.0, 0)
            for row in self.be.to_host(final_rows):
                total, count = total + row, count + 1
                rows.append(total / count)
            state = (total, count)
        else:
            embedded = self._param("emb")[ids_new]  # (n, width)
            ctx = state
            for e in embedded:
                if ctx is None:
                    ctx = e
                elif self.kind == "context":
                    ctx = ctx + e
                else:
                    gate = 1.0 / (1.0 + np.exp(-(e @ self._param("gate.w")[0]
                                                  + self._param("gate.b")[0, 0])))
                    ctx = gate * ctx + e
                rows.append(ctx)
            state = ctx
        feature = np.stack(rows)  # (n, width)
        p = _softmax(feature @ self._param("w") + self._param("b")[0])  # (n, experts)
        return ((1 - self.epsilon) * p + self.epsilon / self.n).astype(self.be.dtype), state

    def backward(self, dweights: np.ndarray, saved):
        """Add the router's gradients for dweights (B*T, n); returns the final stream's gradient (B*T, width) on
        the host for `global`, else None."""
        ids_host, feature, p, gate = saved
        batch, seq_len = ids_host.shape
        dp = (1 - self.epsilon) * dweights
        dz = p * (dp - (p * dp).sum(axis=1, keepdims=True))  # (B*T, n): the softmax's backward
        self._add_grad("w", feature.T @ dz)
        self._add_grad("b", dz.sum(axis=0))
        dfeature = (dz @ self._param("w").T).reshape(batch, seq_len, -1)  # (B, T, width)
        if self.kind == "global":
            counts = np.arange(1, seq_len + 1, dtype=dfeature.dtype)[None, :, None]
            return _reverse_cumsum(dfeature / counts).reshape(batch * seq_len, -1)
        if self.kind == "context":
            dembedded = _reverse_cumsum(dfeature)
        else:
            feature = feature.reshape(batch, seq_len, -1)
            dembedded = np.empty_like(dfeature)  # (B, T, width)
            dgate = np.zeros(gate.shape, dtype=dfeature.dtype)  # (B, T)
            running = np.zeros_like(dfeature[:, 0])  # (B, width): d loss / d feature[t], all paths
            for t in range(seq_len - 1, -1, -1):
                running = running + dfeature[:, t]
                dembedded[:, t] = running
                if t > 0:
                    dgate[:, t] = (running * feature[:, t - 1]).sum(axis=1)
                    running = gate[:, t, None] * running
            dlogit = dgate * gate * (1 - gate)  # (B, T): through the sigmoid
            embedded = self._param("emb")[ids_host]
            self._add_grad("gate.w", np.einsum("bt,btw->w", dlogit, embedded))
            self._add_grad("gate.b", dlogit.sum(keepdims=True))
            dembedded = dembedded + dlogit[:, :, None] * self._param("gate.w")[0]
        demb = np.zeros_like(self._param("emb"))  # (V, width)
        np.add.at(demb, ids_host.reshape(-1), dembedded.reshape(batch * seq_len, -1))
        self._add_grad("emb", demb)
        return None
