"""Multi-head causal self-attention with RoPE and heads of equal or unequal widths.

Heads are processed in groups: a group is a run of adjacent heads of the same
width, so equal heads are one group and all their work is one batched matmul
over (heads x sequences). A batch of B sequences of length T arrives packed as
B*T rows. Inside a group, the G heads are laid out as G*B*T rows of width w,
ordered (head, sequence, position), so row r is at position r % T: exactly the
layout `rope_apply` and `fused_attn_softmax` expect for stacked blocks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from microgpt.backends.base import Backend
from microgpt.model.layers import Linear, linear_specs
from microgpt.model.params import Parameters, ParamSpec


@dataclass(frozen=True)
class HeadGroup:
    col: int  # first column in d_model
    count: int  # heads in the group
    width: int  # columns per head

    @property
    def end(self) -> int:
        return self.col + self.count * self.width


def head_groups(head_dims: tuple[int, ...]) -> list[HeadGroup]:
    """Maximal runs of adjacent heads of the same width."""
    groups: list[HeadGroup] = []
    col = 0
    for width in head_dims:
        last = groups[-1] if groups else None
        if last is not None and last.width == width:
            groups[-1] = HeadGroup(last.col, last.count + 1, width)
        else:
            groups.append(HeadGroup(col, 1, width))
        col += width
    return groups


def split_heads(x, group: HeadGroup):
    """New contiguous (G*rows, w) from the group's columns of x (rows, d), ordered (head, row)."""
    rows = x.shape[0]
    cols = x[:, group.col : group.end].reshape(rows, group.count, group.width)
    return cols.transpose(1, 0, 2).copy().reshape(group.count * rows, group.width)


def merge_heads(dst, heads, group: HeadGroup) -> None:
    """Write (G*rows, w) head outputs back into the group's columns of dst (rows, d)."""
    rows = dst.shape[0]
    target = dst[:, group.col : group.end].reshape(rows, group.count, group.width)  # a view
    target[...] = heads.reshape(group.count, rows, group.width).transpose(1, 0, 2)


class Attention:
    def __init__(self, backend: Backend, params: Parameters, name: str, head_dims: tuple[int, ...], rope):
        self.be = backend
        self.wq, self.wk, self.wv, self.wo = (Linear(backend, params, f"{name}.{p}") for p in ("wq", "wk", "wv", "wo"))
        self.groups = head_groups(head_dims)
        self.rope = rope  # RopeTables: (cos, sin) per width, on the backend

    @staticmethod
    def specs(name: str, d_model: int) -> list[ParamSpec]:
        return [s for p in ("wq", "wk", "wv", "wo") for s in linear_specs(f"{name}.{p}", d_model, d_model)]

    def forward(self, x, batch: int, seq_len: int):
        be, T = self.be, seq_len
        q, k, v = self.wq.forward(x), self.wk.forward(x), self.wv.forward(x)  # each (B*T, d)
        mixed = be.zeros(x.shape)  # (B*T, d): the heads' outputs side by side
        saved = []
        for g in self.groups:
            n = g.count * batch  # (T, w) blocks in this group
            cos, sin = self.rope.tables(g.width, T)
            qg, kg, vg = split_heads(q, g), split_heads(k, g), split_heads(v, g)  # each (n*T, w)
            be.rope_apply(qg, cos, sin)
            be.rope_apply(kg, cos, sin)
            out, attn_saved = be.causal_attention(qg.reshape(n, T, g.width), kg.reshape(n, T, g.width),
                                                  vg.reshape(n, T, g.width), 1.0 / math.sqrt(g.width))  # (n, T, w)
            merge_heads(mixed, out, g)
            saved.append(attn_saved)
        return self.wo.forward(mixed), (x, mixed, saved)

    def backward(self, dy, cache, batch: int, seq_len: int):
        be, T = self.be, seq_len
        x, mixed, saved = cache
        dmixed = self.wo.backward(dy, mixed)  # (B*T, d)
        dq, dk, dv = be.zeros(x.shape), be.zeros(x.shape), be.zeros(x.shape)
        for g, attn_saved in zip(self.groups, saved):
            n, w = g.count * batch, g.width
            cos, sin = self.rope.tables(w, T)
            dout = split_heads(dmixed, g).reshape(n, T, w)
            dqg, dkg, dvg = be.causal_attention_backward(dout, attn_saved, 1.0 / math.sqrt(w))  # each (n, T, w)
            dqg, dkg = dqg.reshape(n * T, w), dkg.reshape(n * T, w)
            be.rope_apply_inverse(dqg, cos, sin)
            be.rope_apply_inverse(dkg, cos, sin)
            merge_heads(dq, dqg, g)
            merge_heads(dk, dkg, g)
            merge_heads(dv, dvg, g)
        dx = self.wq.backward(dq, x)
        be.add_(dx, self.wk.backward(dk, x))
        be.add_(dx, self.wv.backward(dv, x))
        return dx
