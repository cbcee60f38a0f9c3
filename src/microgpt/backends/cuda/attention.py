"""Causal attention: flash attention on our kernels (attention.cu), else the base class's materialised path.

`FlashAttention` is the mixin `CuBLASBackend` takes `causal_attention` and its
backward from. With attention="flash" (the default) a square block of heads of
width up to FLASH_MAX_WIDTH runs fused: the forward keeps each head's output and
row log-sum-exps, never the (T, T) scores; the backward recomputes them tile by
tile. Everything else (one query against a cache, wider heads, attention="materialised",
or --precision bf16, whose products the flash kernels do not round) takes `Backend`'s path. `saved` carries which path ran, and
`attention_memory` says what each path keeps, for the memory estimate.
"""

from __future__ import annotations

import math

import numpy as np

from microgpt.backends.cuda import kernel_launch as launch

FLASH_MAX_WIDTH = 128  # attention.cu's MAX_WIDTH: wider heads take the materialised path
FLASH_ROWS = 8  # attention.cu's ROWS_PER_BLOCK: one warp per row, blocks of (32, FLASH_ROWS) threads
ATTENTION_KINDS = ("flash", "materialised")


class FlashAttention:
    """Needs `_cp`, `dtype`, `attention`, the array checks of `DeviceArrays` and the launches of
    `KernelLaunches`; comes before `Backend` in `CuBLASBackend`'s bases, whose path it falls back to."""

    def causal_attention(self, q, k, v, scale):
        """Flash attention for Tq == Tk and widths up to FLASH_MAX_WIDTH; otherwise (Tq < Tk queries against a
        cache, wider heads, or attention="materialised") the base class's materialised path."""
        op = "causal_attention"
        q, k, v = (self._mat(a, op, ndim=3) for a in (q, k, v))
        n, t, w = q.shape
        if not self._flash(w) or k.shape[1] != t:
            out, saved = super().causal_attention(q, k, v, scale)
            return out, ("materialised", saved)
        for name, other in (("k", k), ("v", v)):
            if other.shape != q.shape:
                raise ValueError(f"{op}: q is {q.shape} but {name} is {other.shape}")
        out = self._cp.empty_like(q)  # (n, T, w)
        lse = self._cp.empty((n, t), dtype=self.dtype)  # each row's log-sum-exp, for the backward
        self._launch(
            "attention.cu", "flash_forward", self._flash_grid(op, n, t), (32, FLASH_ROWS), q, k, v, out, lse,
            np.int32(t), np.int32(w), np.float32(scale),
        )
        return out, ("flash", (q, k, v, out, lse))

    def causal_attention_backward(self, dout, saved, scale):
        kind, saved = saved
        if kind == "materialised":
            return super().causal_attention_backward(dout, saved, scale)
        op = "causal_attention_backward"
        q, k, v, out, lse = saved
        dout = self._mat(dout, op, ndim=3)
        self._same_shape(op, dout, q)
        n, t, w = q.shape
        delta = self._cp.empty((n, t), dtype=self.dtype)  # rowsum(dout * out)
        self._launch(
            "attention.cu", "attention_row_dots", (math.ceil(n * t / FLASH_ROWS),), (32, FLASH_ROWS), dout, out,
            delta, np.int64(n * t), np.int32(w),
        )
        dq, dk, dv = self._cp.empty_like(q), self._cp.empty_like(q), self._cp.empty_like(q)  # each (n, T, w)
        grid, block, sizes = self._flash_grid(op, n, t), (32, FLASH_ROWS), (np.int32(t), np.int32(w), np.float32(scale))
        self._launch("attention.cu", "flash_backward_dq", grid, block, q, k, v, dout, lse, delta, dq, *sizes)
        self._launch("attention.cu", "flash_backward_dkv", grid, block, q, k, v, dout, lse, delta, dk, dv, *sizes)
        return dq, dk, dv

    def attention_memory(self, blocks, seq_len, width):
        """Flash keeps each row's output and log-sum-exp, and its backward's one temporary beyond the
        gradients is rowsum(dout * out); the materialised path answers as the base class does, with the
        bfloat16 bits its softmaxes write at bf16."""
        if not self._flash(width):  # at bf16, the probabilities' bits and their gradient's too (rounding.py)
            kept, temporary = super().attention_memory(blocks, seq_len, width)
            probabilities = blocks * seq_len * seq_len
            return kept + self.rounded_memory(probabilities), temporary + self.rounded_memory(probabilities)
        return blocks * seq_len * (width + 1), blocks * seq_len

    def _flash(self, width: int) -> bool:
        """Whether square blocks of heads this wide take the flash kernels: in float32 alone, since at bf16 the
        materialised path's products (bmm) are the ones that round their inputs."""
        return self.attention == "flash" and width <= FLASH_MAX_WIDTH and self.precision == "fp32"

    def _flash_grid(self, op: str, n: int, t: int) -> tuple[int, int]:
        """(heads, row blocks): grid.y is capped at 65535 blocks of FLASH_ROWS rows."""
        blocks = math.ceil(t / FLASH_ROWS)
        if blocks > launch.MAX_GRID_Y:
            raise ValueError(f"{op}: T = {t} is more than {launch.MAX_GRID_Y * FLASH_ROWS} positions")
        return n, blocks
