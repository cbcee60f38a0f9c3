"""Rotary position embedding tables.

For a head of width `dim`, pair i = columns (2i, 2i+1) rotates by
theta = pos / 10000^(2i/dim). The tables are (positions, dim) with both members
of a pair holding the same value; an odd last column gets cos 1, sin 0 (the ops
leave it as it is). Angles are computed in float64 on the host.
"""

from __future__ import annotations

import numpy as np

ROPE_BASE = 10000.0


def rope_tables(dim: int, n_positions: int, first_position: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(cos, sin), each (n_positions, dim) float64, for positions first_position .. first_position + n - 1."""
    pairs = dim // 2
    inv_freq = ROPE_BASE ** (-2.0 * np.arange(pairs) / dim)  # (pairs,)
    positions = np.arange(first_position, first_position + n_positions, dtype=np.float64)
    angles = positions[:, None] * inv_freq[None, :]  # (n_positions, pairs)
    cos = np.ones((n_positions, dim))
    sin = np.zeros((n_positions, dim))
    cos[:, 0 : 2 * pairs : 2] = cos[:, 1 : 2 * pairs : 2] = np.cos(angles)
    sin[:, 0 : 2 * pairs : 2] = sin[:, 1 : 2 * pairs : 2] = np.sin(angles)
    return cos, sin
