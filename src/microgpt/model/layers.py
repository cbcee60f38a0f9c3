"""The transformer's layers: Linear, LayerNorm, attention, the ReLU feed-forward, and the pre-LayerNorm block
built of them, shared by the families (gpt, the ensemble's experts, the lookahead's heads) and the graph's ops.

Each layer is a forward/backward pair written against the backend contract, bound to one set of parameter
views (`ParameterViews`: the weights it reads, the gradient buffers it adds into). `forward` returns its
output and what backward needs; `backward` takes that, adds the parameter gradients into their buffers, and
returns the gradient of its input. The attention's heads are `attention.attend`'s (head groups, RoPE, the
masks, a KV cache while decoding).
"""

from __future__ import annotations

import math

from microgpt.backends.base import Backend
from microgpt.model.attention import attend, attend_backward, head_groups, merge_heads, split_heads
from microgpt.model.params import ParameterViews, ParamSpec
from microgpt.model.rope import RopeTables


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


class Attention:
    """Causal self-attention with RoPE: q, k, v projections, the heads (attention.attend), the output projection."""

    def __init__(self, backend: Backend, params: ParameterViews, name: str, head_dims: tuple[int, ...],
                 rope: RopeTables):
        self.be = backend
        self.wq, self.wk, self.wv, self.wo = (Linear(backend, params, f"{name}.{p}") for p in ("wq", "wk", "wv", "wo"))
        self.groups = head_groups(head_dims)
        self.rope = rope

    @staticmethod
    def specs(name: str, d_model: int) -> list[ParamSpec]:
        return [s for p in ("wq", "wk", "wv", "wo") for s in linear_specs(f"{name}.{p}", d_model, d_model)]

    def forward(self, x, batch: int, seq_len: int, cache=None, start: int = 0):
        """(output (B*T, d), saved) for x (B*T, d): B sequences of T rows at positions start .. start + T - 1,
        each row attending to the rows up to its own (through a KV cache, one ring per head group, where one is
        given; `attend` says how). `saved` is what `backward` needs (training only)."""
        q, k, v = self.wq.forward(x), self.wk.forward(x), self.wv.forward(x)  # each (B*T, d)
        mixed, group_saved = attend(self.be, self.groups, q, k, v, batch, seq_len, self.rope, start=start,
                                    caches=cache)  # (B*T, d): the heads' outputs side by side
        return self.wo.forward(mixed), (x, mixed, group_saved)  # (B*T, d)

    def forward_last(self, x, batch: int, seq_len: int):
        """Output (B, d) of each sequence's last row alone, for x (B*T, d) at positions 0 .. T - 1 (forward
        only): keys and values from every row, the query from the last, attending to all of them (the
        backend's window_attention over the sequence as a ring of T slots)."""
        be, T = self.be, seq_len
        last = x.reshape(batch, T, -1)[:, T - 1].copy()  # (B, d)
        q, k, v = self.wq.forward(last), self.wk.forward(x), self.wv.forward(x)  # (B, d), (B*T, d) x2
        mixed = be.zeros(last.shape)  # (B, d)
        for g in self.groups:
            n, w = g.count * batch, g.width
            cos, sin = self.rope.tables(w, T)  # each (T, w)
            q_heads, k_heads, v_heads = split_heads(q, g), split_heads(k, g), split_heads(v, g)  # (n, w), (n*T, w) x2
            be.rope_apply(q_heads, cos[T - 1 :], sin[T - 1 :])
            be.rope_apply(k_heads, cos, sin)
            out = be.window_attention(q_heads.reshape(n, 1, w), k_heads.reshape(n, T, w), v_heads.reshape(n, T, w),
                                      T - 1, T, 1.0 / math.sqrt(w))  # (n, 1, w)
            merge_heads(mixed, out, g)
        return self.wo.forward(mixed)  # (B, d)

    def backward(self, dy, saved, batch: int, seq_len: int):
        """dx (B*T, d) for dy (B*T, d) and forward's `saved` (a training forward: no cache, start 0)."""
        x, mixed, group_saved = saved
        dmixed = self.wo.backward(dy, mixed)  # (B*T, d)
        dq, dk, dv = attend_backward(self.be, self.groups, dmixed, group_saved, batch, seq_len, self.rope)
        dx = self.wq.backward(dq, x)  # (B*T, d)
        be = self.be
        be.add_(dx, self.wk.backward(dk, x))
        be.add_(dx, self.wv.backward(dv, x))
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


def block_specs(name: str, d_model: int, d_ff: int) -> list[ParamSpec]:
    """A block's parameters, in checkpoint order."""
    return (layer_norm_specs(f"{name}.ln1", d_model) + Attention.specs(f"{name}.attn", d_model)
            + layer_norm_specs(f"{name}.ln2", d_model) + FeedForward.specs(f"{name}.ff", d_model, d_ff))


class Block:
    """x + Attn(LN1(x)), then x + FFN(LN2(x))."""

    def __init__(self, backend: Backend, params: ParameterViews, name: str, head_dims: tuple[int, ...],
                 rope: RopeTables):
        self.be = backend
        self.ln1 = LayerNorm(backend, params, f"{name}.ln1")
        self.attn = Attention(backend, params, f"{name}.attn", head_dims, rope)
        self.ln2 = LayerNorm(backend, params, f"{name}.ln2")
        self.ff = FeedForward(backend, params, f"{name}.ff")

    def forward(self, x, batch: int, seq_len: int, cache=None, start: int = 0):
        """(output (B*T, d), saved) for x (B*T, d); cache and start as in Attention.forward."""
        attn_input, ln1_saved = self.ln1.forward(x)  # (B*T, d)
        attn_output, attn_saved = self.attn.forward(attn_input, batch, seq_len, cache, start)  # (B*T, d)
        after_attn = self.be.add(x, attn_output)  # (B*T, d): the residual stream between the two halves
        ffn_input, ln2_saved = self.ln2.forward(after_attn)  # (B*T, d)
        ffn_output, ff_saved = self.ff.forward(ffn_input)  # (B*T, d)
        out = self.be.add(after_attn, ffn_output)  # (B*T, d)
        return out, (ln1_saved, attn_saved, ln2_saved, ff_saved)

    def forward_last(self, x, batch: int, seq_len: int):
        """Output (B, d) of each sequence's last row alone, for x (B*T, d) (forward only; Attention.forward_last)."""
        attn_input, _ = self.ln1.forward(x)  # (B*T, d): every row's keys and values are needed
        last = x.reshape(batch, seq_len, -1)[:, seq_len - 1].copy()  # (B, d)
        after_attn = self.be.add(last, self.attn.forward_last(attn_input, batch, seq_len))  # (B, d)
        ffn_output, _ = self.ff.forward(self.ln2.forward(after_attn)[0])  # (B, d)
        return self.be.add(after_attn, ffn_output)

    def backward(self, dout, saved, batch: int, seq_len: int):
        ln1_saved, attn_saved, ln2_saved, ff_saved = saved
        d_after_attn = self.ln2.backward(self.ff.backward(dout, ff_saved), ln2_saved)  # (B*T, d)
        self.be.add_(d_after_attn, dout)
        d_attn_input = self.attn.backward(d_after_attn, attn_saved, batch, seq_len)  # (B*T, d)
        dx = self.ln1.backward(d_attn_input, ln1_saved)  # (B*T, d)
        self.be.add_(dx, d_after_attn)
        return dx
