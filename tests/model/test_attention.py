"""Head layout helpers: split_heads and merge_heads move a head group's columns without relying on views."""

from __future__ import annotations

import numpy as np
import pytest

from microgpt.model.attention import head_groups, merge_heads, split_heads

LAYOUTS = [(4, 4), (1, 3, 2, 2), (3, 5, 1)]


class CopyingReshape(np.ndarray):
    """An ndarray whose reshape always returns a copy, as a reshape of a non-contiguous slice may on NumPy or
    CuPy: a write through dst[:, cols].reshape(...) would be lost on it."""

    def reshape(self, *shape, **kwargs):
        return np.array(np.asarray(self).reshape(*shape, **kwargs))


@pytest.mark.parametrize("head_dims", LAYOUTS)
def test_merge_heads_writes_into_dst_even_where_a_reshape_of_it_copies(head_dims):
    rows, d = 6, sum(head_dims)
    x = np.random.default_rng(0).normal(size=(rows, d))  # (rows, d)
    dst = np.zeros((rows, d)).view(CopyingReshape)  # (rows, d)
    for group in head_groups(head_dims):
        merge_heads(dst, split_heads(x, group), group)
    np.testing.assert_array_equal(np.asarray(dst), x)


@pytest.mark.parametrize("head_dims", LAYOUTS)
def test_merge_heads_writes_into_a_non_contiguous_dst(head_dims):
    rows, d = 6, sum(head_dims)
    x = np.random.default_rng(1).normal(size=(rows, d))  # (rows, d)
    interleaved = np.zeros((rows, 2 * d))  # (rows, 2d): dst is every other column
    for group in head_groups(head_dims):
        merge_heads(interleaved[:, ::2], split_heads(x, group), group)
    np.testing.assert_array_equal(interleaved[:, ::2], x)
    np.testing.assert_array_equal(interleaved[:, 1::2], 0.0)


@pytest.mark.parametrize("head_dims", LAYOUTS)
def test_split_heads_orders_rows_by_head_then_row_and_merge_takes_blocks_too(head_dims):
    batch, seq_len, d = 2, 3, sum(head_dims)
    rows = batch * seq_len
    x = np.random.default_rng(2).normal(size=(rows, d))  # (B*T, d)
    merged = np.zeros((rows, d))  # (B*T, d)
    for group in head_groups(head_dims):
        heads = split_heads(x, group)  # (G*B*T, w)
        for head in range(group.count):
            col = group.col + head * group.width
            np.testing.assert_array_equal(heads[head * rows : (head + 1) * rows], x[:, col : col + group.width])
        blocks = heads.reshape(group.count * batch, seq_len, group.width)  # (G*B, T, w): causal_attention's form
        merge_heads(merged, blocks, group)
    np.testing.assert_array_equal(merged, x)
