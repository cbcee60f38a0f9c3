"""Rotary position embedding: the cos/sin tables, and the backend copies the model reads them from.

For a head of width `dim`, pair i = columns (2i, 2i+1) rotates by
theta = pos / 10000^(2i/dim). The tables are (positions, dim) with both members
of a pair holding the same value; an odd last column gets cos 1, sin 0 (the ops
leave it as it is). Angles are computed in float64 on the host.
"""

from __future__ import annotations

import numpy as np

from microgpt.backends.base import Backend

ROPE_BASE = 10000.0


def rope_tables(dim: int, n_positions: int, first_position: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(cos, sin), each (n_positions, dim) float64, for positions first_position .. first_position + n - 1."""
    pairs = dim // 2
    inv_freq = ROPE_BASE ** (-2.0 * np.arange(pairs) / dim)  # (pairs,)
    positions = np.arange(first_position, first_position + n_positions, dtype=np.float64)  # (n_positions,)
    angles = positions[:, None] * inv_freq[None, :]  # (n_positions, pairs)
    cos = np.ones((n_positions, dim))  # (n_positions, dim)
    sin = np.zeros((n_positions, dim))  # (n_positions, dim)
    cos[:, 0 : 2 * pairs : 2] = cos[:, 1 : 2 * pairs : 2] = np.cos(angles)
    sin[:, 0 : 2 * pairs : 2] = sin[:, 1 : 2 * pairs : 2] = np.sin(angles)
    return cos, sin


class RopeTables:
    """The model's cos/sin tables on the backend, per head width, in memory bounded by seq_len.

    Positions 0 .. seq_len - 1 (training, a prompt, decoding while the context fits) are slices of one
    resident (seq_len, width) pair per width, made on first use. A later position, which only a sliding
    KV cache asks for, gets a pair made for just the positions asked; the latest such pair is kept per
    width, so the layers of one decoding step share it (and a span inside it is a slice of it), and it
    replaces the one before. Each row holds the
    same values either way (`rope_tables` computes a position's angles alone), so where a table comes
    from never changes a result.
    """

    def __init__(self, backend: Backend, seq_len: int):
        self.be = backend
        self.seq_len = seq_len
        self._resident: dict[int, tuple] = {}  # width -> (cos, sin), each (seq_len, width)
        self._latest: dict[int, tuple] = {}  # width -> ((first_position, n), (cos, sin)), each (n, width)

    def tables(self, width: int, n_positions: int, first_position: int = 0):
        """(cos, sin), each (n_positions, width), for positions first_position onwards."""
        end = first_position + n_positions
        if end <= self.seq_len:
            if width not in self._resident:
                self._resident[width] = self._upload(width, self.seq_len, 0)
            cos, sin = self._resident[width]  # each (seq_len, width)
            return cos[first_position:end], sin[first_position:end]
        if width in self._latest:  # a span inside the latest one (a speculative pass's heads, over its kept tokens)
            (first, count), (cos, sin) = self._latest[width]
            if (first, count) == (first_position, n_positions):
                return cos, sin
            if first <= first_position and end <= first + count:
                return cos[first_position - first : end - first], sin[first_position - first : end - first]
        self._latest[width] = ((first_position, n_positions), self._upload(width, n_positions, first_position))
        return self._latest[width][1]

    def held_shapes(self) -> list[tuple[int, ...]]:
        """The shape of every table held on the backend (what bounds this object's memory)."""
        pairs = [*self._resident.values(), *(pair for _, pair in self._latest.values())]
        return [table.shape for pair in pairs for table in pair]

    def _upload(self, width: int, n_positions: int, first_position: int) -> tuple:
        cos, sin = rope_tables(width, n_positions, first_position)  # each (n_positions, width)
        return self.be.from_host(cos), self.be.from_host(sin)
