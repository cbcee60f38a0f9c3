"""The primitives that mix positions: RoPE, multi-head attention under a mask, the causal prefix mean, and
`shift`, which reads the row `by` positions later (the tokens a hydra head reads after its position).

`attention` takes queries, keys and values (each [T, width]) and heads of equal or unequal widths summing
to the width (a count splits it evenly), and attends under its `mask`:
- `causal`: position t sees keys at t and before (the backend's causal_attention);
- `gap`: t sees t and before, and t + gap + 1 and after (the backend's gap_attention, for fill-in-the-middle);
- `full`: every key, and `anticausal`: t and after. Neither is sound before a next-token loss; they are
  here so that the causality check has something to refuse (the original µGPT's future head is anticausal).

Heads run in groups of adjacent equal widths, as in model/attention.py. Where a `rope` node's output feeds
only an attention's queries or keys, the compiler drops the rope node and the attention rotates its own
split heads (`rope_attention`): the gpt family's arithmetic, without merging and splitting the heads twice.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from microgpt.core.errors import ConfigError
from microgpt.model.attention import MAX_HEADS, head_groups, merge_heads, split_heads
from microgpt.model.graph.ops.base import Kernel, Op, Port, expect, whole_param

MASKS = ("causal", "gap", "full", "anticausal")


def head_widths(params: dict, width: int) -> tuple[int, ...]:
    """The head widths from a `heads` param (a count, or a list of widths) for queries `width` wide; a count or
    list past MAX_HEADS is refused before its widths are made."""
    heads = params["heads"]
    count = len(heads) if isinstance(heads, list) else heads
    if isinstance(count, int) and count > MAX_HEADS:
        raise ConfigError(f"param heads gives {count:,} heads, more than {MAX_HEADS:,}; give fewer, wider heads")
    if isinstance(heads, int) and not isinstance(heads, bool):
        if heads < 1 or width % heads:
            raise ConfigError(f"param heads {heads} does not divide the width {width}; give a divisor or the widths")
        return (width // heads,) * heads
    if (not isinstance(heads, list) or not heads
            or not all(isinstance(h, int) and not isinstance(h, bool) and h >= 1 for h in heads)):
        raise ConfigError(f"param heads must be a count or a list of widths, got {heads!r}")
    if sum(heads) != width:
        raise ConfigError(f"param heads {heads} sums to {sum(heads)}, but the input is {width} wide")
    return tuple(heads)


class RopeKernel(Kernel):
    def __init__(self, backend, widths, rope):
        self.be, self.groups, self.rope = backend, head_groups(widths), rope

    def forward(self, inputs, run):
        (x,) = inputs
        out = x.copy()  # (rows, width)
        for g in self.groups:
            heads = split_heads(x, g)  # (G*rows, w)
            cos, sin = self.rope.tables(g.width, run.seq_len, first_position=run.start)  # each (T, w)
            self.be.rope_apply(heads, cos, sin)
            merge_heads(out, heads, g)
        return [out], None

    def backward(self, douts, saved, run):
        dx = douts[0].copy()  # (rows, width)
        for g in self.groups:
            heads = split_heads(douts[0], g)  # (G*rows, w)
            cos, sin = self.rope.tables(g.width, run.seq_len)  # each (T, w)
            self.be.rope_apply_inverse(heads, cos, sin)
            merge_heads(dx, heads, g)
        return [dx]


class RopeOp(Op):
    name = "rope"
    doc = "rotary position embedding of each head's columns by its position (pairs of columns, base 10000)"
    inputs: ClassVar[dict] = {"x": Port("stream")}
    params: ClassVar[dict] = {"heads": "heads"}
    cross_position = True

    def infer(self, node):
        expect("x", node.in_types["x"][0], "stream")
        head_widths(node.params, node.in_types["x"][0].width)
        return {"out": node.in_types["x"][0]}

    def kernel(self, node, backend, views, shared):
        return RopeKernel(backend, head_widths(node.params, node.in_types["x"][0].width), shared.rope)


class AttentionKernel(Kernel):
    """Per head group: split the heads, rotate queries and keys (rope_attention), attend, merge."""

    def __init__(self, backend, widths, mask: str, gap: int, rope, rotates: bool):
        self.be, self.groups, self.mask, self.gap = backend, head_groups(widths), mask, gap
        self.rope, self.rotates = rope, rotates

    def forward(self, inputs, run):
        be, T, batch = self.be, run.seq_len, run.batch
        q, k, v = inputs  # each (B*T, width)
        mixed = be.zeros(q.shape)  # (B*T, width): the heads' outputs side by side
        group_saved = []
        for i, g in enumerate(self.groups):
            n, w = g.count * batch, g.width
            q_heads, k_heads, v_heads = split_heads(q, g), split_heads(k, g), split_heads(v, g)  # each (n*T, w)
            if self.rotates:
                cos, sin = self.rope.tables(w, T, first_position=run.start)  # each (T, w)
                be.rope_apply(q_heads, cos, sin)
                be.rope_apply(k_heads, cos, sin)
            queries, keys, values = (a.reshape(n, T, w) for a in (q_heads, k_heads, v_heads))  # each (n, T, w)
            scale = 1.0 / math.sqrt(w)
            if run.caches is not None:  # decoding one sequence: the new keys join the cache (causal masks only)
                out, saved = run.caches[self][i].attend(queries, keys, values, run.start, scale), None
            elif self.mask == "causal":
                out, saved = be.causal_attention(queries, keys, values, scale)  # (n, T, w)
            elif self.mask == "gap":
                out, saved = be.gap_attention(queries, keys, values, scale, self.gap)  # (n, T, w)
            else:
                out, saved = self._masked(queries, keys, values, scale)  # (n, T, w)
            merge_heads(mixed, out, g)
            group_saved.append(saved)
        return [mixed], group_saved

    def _hidden(self, t: int) -> np.ndarray:
        after = np.arange(t)[None, :] - np.arange(t)[:, None]  # (T, T): key j's distance after query i
        return np.zeros((t, t), dtype=bool) if self.mask == "full" else after < 0

    def _masked(self, q, k, v, scale: float):
        n, t, _ = q.shape
        probs = self.be._masked_softmax(self.be.bmm(q, k, False, True), scale, self._hidden(t))  # (n*T, T)
        return self.be.bmm(probs.reshape(n, t, t), v), (q, k, v, probs)

    def _masked_backward(self, dout, saved, scale: float):
        be = self.be
        q, k, v, probs = saved
        n, t, _ = q.shape
        dprobs = be.bmm(dout, v, False, True)  # (n, T, T)
        dv = be.bmm(probs.reshape(n, t, t), dout, True, False)  # (n, T, w)
        dscores = be.softmax_backward(probs, dprobs.reshape(n * t, t))  # (n*T, T)
        be.scale_(dscores, scale)
        dscores = dscores.reshape(n, t, t)
        return be.bmm(dscores, k), be.bmm(dscores, q, True, False), dv

    def backward(self, douts, group_saved, run):
        be, T = self.be, run.seq_len
        (dmixed,) = douts
        dq, dk, dv = be.zeros(dmixed.shape), be.zeros(dmixed.shape), be.zeros(dmixed.shape)  # each (B*T, width)
        for g, saved in zip(self.groups, group_saved):
            n, w = g.count * run.batch, g.width
            dout = split_heads(dmixed, g).reshape(n, T, w)  # (n, T, w)
            scale = 1.0 / math.sqrt(w)
            if self.mask == "causal":
                dq_heads, dk_heads, dv_heads = be.causal_attention_backward(dout, saved, scale)  # each (n, T, w)
            elif self.mask == "gap":
                dq_heads, dk_heads, dv_heads = be.gap_attention_backward(dout, saved, scale, self.gap)
            else:
                dq_heads, dk_heads, dv_heads = self._masked_backward(dout, saved, scale)
            dq_rows, dk_rows = dq_heads.reshape(n * T, w), dk_heads.reshape(n * T, w)  # each (n*T, w)
            if self.rotates:
                cos, sin = self.rope.tables(w, T)  # each (T, w)
                be.rope_apply_inverse(dq_rows, cos, sin)
                be.rope_apply_inverse(dk_rows, cos, sin)
            merge_heads(dq, dq_rows, g)
            merge_heads(dk, dk_rows, g)
            merge_heads(dv, dv_heads, g)
        return [dq, dk, dv]


class AttentionOp(Op):
    name = "attention"
    doc = ("softmax(q k^T / sqrt(head width), masked) v per head; heads a count or widths; mask causal, gap "
           "(with gap), full or anticausal")
    inputs: ClassVar[dict] = {"q": Port("stream"), "k": Port("stream"), "v": Port("stream")}
    params: ClassVar[dict] = {"heads": "heads", "mask": "causal", "gap": 1}
    words = frozenset({"mask"})
    cross_position = True
    rotates = False

    def infer(self, node):
        q = node.in_types["q"][0]
        expect("q", q, "stream")
        expect("k", node.in_types["k"][0], "stream", q.width)
        expect("v", node.in_types["v"][0], "stream", q.width)
        head_widths(node.params, q.width)
        if node.params["mask"] not in MASKS:
            raise ConfigError(f"param mask must be one of {', '.join(MASKS)}, got {node.params['mask']!r}")
        whole_param(node.params, "gap")
        return {"out": q}

    def cacheable(self, node) -> bool:
        """Whether decoding may keep this attention's keys and values (a causal mask: a key never changes)."""
        return node.params["mask"] == "causal"

    def kernel(self, node, backend, views, shared):
        widths = head_widths(node.params, node.in_types["q"][0].width)
        return AttentionKernel(backend, widths, node.params["mask"], node.params["gap"], shared.rope, self.rotates)


class RopeAttentionOp(AttentionOp):
    name = "rope_attention"
    doc = "attention whose queries and keys each came through a rope node read by it alone, fused by the compiler"
    internal = True
    rotates = True


class PrefixMeanKernel(Kernel):
    def forward(self, inputs, run):
        (x,) = inputs
        counts = np.arange(1, run.seq_len + 1, dtype=np.float64)[None, :, None]  # (1, T, 1)
        shaped = x.reshape(run.batch, run.seq_len, -1)  # (B, T, width)
        return [(shaped.cumsum(axis=1) / counts.astype(x.dtype)).reshape(x.shape)], None

    def backward(self, douts, saved, run):
        (dy,) = douts
        counts = np.arange(1, run.seq_len + 1, dtype=np.float64)[None, :, None].astype(dy.dtype)  # (1, T, 1)
        scaled = dy.reshape(run.batch, run.seq_len, -1) / counts  # (B, T, width)
        return [scaled[:, ::-1].cumsum(axis=1)[:, ::-1].reshape(dy.shape).copy()]  # sums over u >= t


class PrefixMeanOp(Op):
    name = "prefix_mean"
    doc = "out[t] = the mean of x over positions 0 .. t of its sequence"
    inputs: ClassVar[dict] = {"x": Port("stream")}
    cross_position = True

    def infer(self, node):
        expect("x", node.in_types["x"][0], "stream")
        return {"out": node.in_types["x"][0]}

    def kernel(self, node, backend, views, shared):
        return PrefixMeanKernel()


class ShiftKernel(Kernel):
    """out[t] = x[min(t + by, T - 1)] within each sequence: past the window's end its last row, as the lookahead
    family's hydra memory repeats the window's last token (model/lookahead/heads.py's shifted_ids). Slices and
    the backend's zeros only, so it runs on every backend's arrays."""

    def __init__(self, backend, by: int):
        self.be, self.by = backend, by

    def forward(self, inputs, run):
        (x,) = inputs
        T, kept = run.seq_len, max(run.seq_len - self.by, 0)  # kept: the rows that read inside the window
        shaped = x.reshape(run.batch, T, -1)  # (B, T, width)
        out = self.be.zeros(shaped.shape)  # (B, T, width)
        out[:, :kept] = shaped[:, T - kept :]
        out[:, kept:] = shaped[:, T - 1 :]
        return [out.reshape(x.shape)], None  # (B*T, width)

    def backward(self, douts, saved, run):
        (dy,) = douts
        T, kept = run.seq_len, max(run.seq_len - self.by, 0)
        shaped = dy.reshape(run.batch, T, -1)  # (B, T, width)
        dx = self.be.zeros(shaped.shape)  # (B, T, width)
        dx[:, T - kept :] = shaped[:, :kept]
        dx[:, T - 1] += shaped[:, kept:].sum(axis=1)  # the rows past the end read the last
        return [dx.reshape(dy.shape)]


class ShiftOp(Op):
    name = "shift"
    doc = ("out[t] = x[t + by] within each sequence (past its end, its last position): reads `by` positions "
           "ahead, so only a loss with offset above `by` may read it")
    inputs: ClassVar[dict] = {"x": Port("stream")}
    params: ClassVar[dict] = {"by": 1}
    cross_position = True

    def infer(self, node):
        expect("x", node.in_types["x"][0], "stream")
        whole_param(node.params, "by")
        return {"out": node.in_types["x"][0]}

    def kernel(self, node, backend, views, shared):
        return ShiftKernel(backend, node.params["by"])


OPS = [RopeOp(), AttentionOp(), RopeAttentionOp(), PrefixMeanOp(), ShiftOp()]
