"""Multi-head causal self-attention with RoPE and heads of equal or unequal widths.

Heads are processed in groups: a group is a run of adjacent heads of the same
width, so equal heads are one group and all their work is one batched matmul
over (heads x sequences). A batch of B sequences of length T arrives packed as
B*T rows. Inside a group, the G heads are laid out as G*B*T rows of width w,
ordered (head, sequence, position), so row r is at position r % T: exactly the
layout `rope_apply` expects for stacked blocks, and (G*B, T, w) blocks for
`causal_attention`.

`attend` and `attend_backward` are the heads' work, written once for every caller: the transformer's
`Attention` (model/transformer.py: causal, rotated), the lookahead family's gap heads (the gap mask), and the graph's
attention op (any mask, rotated or not). The same forward serves training and decoding: given a KV cache (one
ring per head group, `microgpt.model.kv_cache.KVRing`) and the position of the first new row, it adds the new
keys and values to the cache and attends to all it holds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from microgpt.backends.base import Backend
from microgpt.model.rope import RopeTables

MAX_HEADS = 4096  # heads in one attention: far past any model here, and their widths are a tuple made at once


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
    cols = x[:, group.col : group.end].reshape(rows, group.count, group.width)  # (rows, G, w)
    return cols.transpose(1, 0, 2).copy().reshape(group.count * rows, group.width)  # (G*rows, w)


def merge_heads(dst, heads, group: HeadGroup) -> None:
    """Write head outputs (G*rows, w), or (G*B, T, w) with B*T = rows, into the group's columns of dst.

    dst is (rows, d). One slice assignment into dst itself: no reliance on a reshape of dst being a view.
    """
    rows = dst.shape[0]
    side_by_side = heads.reshape(group.count, rows, group.width).transpose(1, 0, 2)  # (rows, G, w)
    dst[:, group.col : group.end] = side_by_side.reshape(rows, group.count * group.width)  # (rows, G*w)


MASKS = ("causal", "gap", "full", "anticausal")


def hidden_keys(mask: str, seq_len: int):
    """The (T, T) boolean mask of the keys each query may not see, for the masks without a backend op of their
    own: `full` hides none, `anticausal` the keys before the query."""
    after = np.arange(seq_len)[None, :] - np.arange(seq_len)[:, None]  # (T, T): key j's distance after query i
    return np.zeros((seq_len, seq_len), dtype=bool) if mask == "full" else after < 0


def attend(be: Backend, groups: list[HeadGroup], q, k, v, batch: int, seq_len: int, rope: RopeTables | None = None,
           mask: str = "causal", gap: int = 1, start: int = 0, caches=None):
    """(the heads' outputs side by side (B*T, width), saved) of queries, keys and values, each (B*T, width): B
    sequences of T rows at positions start .. start + T - 1, split into each group's heads, queries and keys
    rotated by `rope` (None: not rotated), attending under `mask` (`causal`; `gap`, hiding the `gap` positions
    after each query; `full`; `anticausal`).

    Without caches (training, a full forward) start is 0. With them (one KV ring per group, model/kv_cache.py;
    B is 1; causal only), the new keys and values join the cache and each row attends to the cached positions
    of its window up to its own: a prompt (start 0), one new token, or a few drafted ones. `saved` is what
    `attend_backward` needs (training only)."""
    mixed = be.zeros(q.shape)  # (B*T, width)
    group_saved = []
    for i, g in enumerate(groups):
        n, w = g.count * batch, g.width  # n: (T, w) blocks in this group
        q_heads, k_heads, v_heads = split_heads(q, g), split_heads(k, g), split_heads(v, g)  # each (n*T, w)
        if rope is not None:
            cos, sin = rope.tables(w, seq_len, first_position=start)  # each (T, w)
            be.rope_apply(q_heads, cos, sin)
            be.rope_apply(k_heads, cos, sin)
        queries, keys, values = (a.reshape(n, seq_len, w) for a in (q_heads, k_heads, v_heads))  # each (n, T, w)
        scale = 1.0 / math.sqrt(w)
        if caches is not None:
            out, saved = caches[i].attend(queries, keys, values, start, scale), None  # (n, T, w)
        elif mask == "causal":
            out, saved = be.causal_attention(queries, keys, values, scale)  # (n, T, w)
        elif mask == "gap":
            out, saved = be.gap_attention(queries, keys, values, scale, gap)  # (n, T, w)
        else:
            out, saved = be.masked_attention(queries, keys, values, scale, hidden_keys(mask, seq_len))  # (n, T, w)
        merge_heads(mixed, out, g)
        group_saved.append(saved)
    return mixed, group_saved


def attend_backward(be: Backend, groups: list[HeadGroup], dmixed, group_saved, batch: int, seq_len: int,
                    rope: RopeTables | None = None, mask: str = "causal", gap: int = 1):
    """(dq, dk, dv), each (B*T, width), for the gradient dmixed (B*T, width) of `attend`'s output and its `saved`
    (a training forward: no caches, start 0)."""
    dq, dk, dv = be.zeros(dmixed.shape), be.zeros(dmixed.shape), be.zeros(dmixed.shape)  # each (B*T, width)
    for g, saved in zip(groups, group_saved):
        n, w = g.count * batch, g.width
        dout = split_heads(dmixed, g).reshape(n, seq_len, w)  # (n, T, w)
        scale = 1.0 / math.sqrt(w)
        if mask == "causal":
            dq_heads, dk_heads, dv_heads = be.causal_attention_backward(dout, saved, scale)  # each (n, T, w)
        elif mask == "gap":
            dq_heads, dk_heads, dv_heads = be.gap_attention_backward(dout, saved, scale, gap)
        else:
            dq_heads, dk_heads, dv_heads = be.masked_attention_backward(dout, saved, scale)
        dq_rows, dk_rows = dq_heads.reshape(n * seq_len, w), dk_heads.reshape(n * seq_len, w)  # each (n*T, w)
        if rope is not None:
            cos, sin = rope.tables(w, seq_len)  # each (T, w)
            be.rope_apply_inverse(dq_rows, cos, sin)
            be.rope_apply_inverse(dk_rows, cos, sin)
        merge_heads(dq, dq_rows, g)
        merge_heads(dk, dk_rows, g)
        merge_heads(dv, dv_heads, g)
    return dq, dk, dv
