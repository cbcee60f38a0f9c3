"""The primitives that mix positions: RoPE, multi-head attention under a mask, the causal prefix mean, and
`shift`, which reads the row `by` positions later (the tokens a hydra head reads after its position).

`attention` takes queries, keys and values (each [T, width]) and heads of equal or unequal widths summing
to the width (a count splits it evenly), and attends under its `mask`:
- `causal`: position t sees keys at t and before (the backend's causal_attention);
- `gap`: t sees t and before, and t + gap + 1 and after (the backend's gap_attention, for fill-in-the-middle);
- `full`: every key, and `anticausal`: t and after. Neither is sound before a next-token loss; they are
  here so that the causality check has something to refuse (the original µGPT's future head is anticausal).

The heads' work is model/attention.py's `attend`, the gpt family's own: heads in groups of adjacent equal
widths. Where a `rope` node's output feeds only an attention's queries or keys, the compiler drops the rope
node and the attention rotates its own split heads (`rope_attention`), without merging and splitting them
twice.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from microgpt.core.errors import ConfigError
from microgpt.model.attention import (
    MASKS,
    MAX_HEADS,
    attend,
    attend_backward,
    head_groups,
    merge_heads,
    split_heads,
)
from microgpt.model.graph.ops.base import Kernel, Op, Port, expect, whole_param


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
    """The heads' work of model/attention.py (`attend`), rotating the queries and keys where rope_attention."""

    def __init__(self, backend, widths, mask: str, gap: int, rope, rotates: bool):
        self.be, self.groups, self.mask, self.gap = backend, head_groups(widths), mask, gap
        self.rope = rope if rotates else None

    def forward(self, inputs, run):
        q, k, v = inputs  # each (B*T, width)
        caches = None if run.caches is None else run.caches[self]  # decoding one sequence (causal masks only)
        mixed, group_saved = attend(self.be, self.groups, q, k, v, run.batch, run.seq_len, self.rope, self.mask,
                                    self.gap, run.start, caches)  # (B*T, width)
        return [mixed], group_saved

    def backward(self, douts, group_saved, run):
        return list(attend_backward(self.be, self.groups, douts[0], group_saved, run.batch, run.seq_len, self.rope,
                                    self.mask, self.gap))  # dq, dk, dv, each (B*T, width)


class AttentionOp(Op):
    name = "attention"
    doc = ("softmax(q k^T / sqrt(head width), masked) v per head; heads a count or widths; mask causal, gap "
           "(with gap), full or anticausal")
    inputs: ClassVar[dict] = {"q": Port("stream"), "k": Port("stream"), "v": Port("stream")}
    params: ClassVar[dict] = {"heads": "heads", "mask": "causal", "gap": 1}
    words = frozenset({"mask"})
    choices: ClassVar[dict] = {"mask": MASKS}
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
