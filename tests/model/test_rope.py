"""RopeTables: positions within seq_len slice resident tables; later ones get tables of their own, same rows."""

from __future__ import annotations

import numpy as np
import pytest

from microgpt.backends import get_backend
from microgpt.model.rope import RopeTables, rope_tables

SEQ_LEN = 6


@pytest.mark.parametrize("width", [1, 3, 4, 5])
def test_every_position_gets_the_rows_one_table_over_all_positions_would_hold(width):
    # Before the tables were bounded they grew to cover every position asked for, and a position's row was
    # that one table's row. Each angle is pos * inv_freq in float64, computed per position, so a table made
    # for one position holds exactly the same row: the comparison is exact, not within a tolerance.
    be = get_backend("numpy")
    rope = RopeTables(be, SEQ_LEN)
    grown_cos, grown_sin = (be.from_host(table) for table in rope_tables(width, 1000))  # each (1000, width)
    for first, n in [(0, SEQ_LEN), (2, 3), (SEQ_LEN, 1), (57, 1), (999, 1), (0, 1)]:
        cos, sin = rope.tables(width, n, first_position=first)  # each (n, width)
        np.testing.assert_array_equal(cos, grown_cos[first : first + n])
        np.testing.assert_array_equal(sin, grown_sin[first : first + n])


def test_tables_stay_bounded_by_seq_len_however_far_the_positions_go():
    rope = RopeTables(get_backend("numpy"), SEQ_LEN)
    for position in range(20 * SEQ_LEN):
        for width in (3, 5):
            rope.tables(width, 1, first_position=position)
    shapes = rope.held_shapes()
    # per width: the resident cos and sin (seq_len rows) and the latest later position's cos and sin (1 row)
    assert sorted(shapes) == [(1, 3), (1, 3), (1, 5), (1, 5), (SEQ_LEN, 3), (SEQ_LEN, 3), (SEQ_LEN, 5), (SEQ_LEN, 5)]


def test_the_layers_of_one_step_share_the_table_for_a_later_position():
    rope = RopeTables(get_backend("numpy"), SEQ_LEN)
    first = rope.tables(4, 1, first_position=40)
    again = rope.tables(4, 1, first_position=40)
    assert all(a is b for a, b in zip(first, again))  # made once, not once per layer
    later = rope.tables(4, 1, first_position=41)
    assert later[0] is not first[0]


def test_a_span_inside_the_latest_later_one_is_a_slice_of_it():
    # a speculative pass's heads ask for the rows of the tokens kept, inside the pass's own span
    rope = RopeTables(get_backend("numpy"), SEQ_LEN)
    whole = rope.tables(6, 4, first_position=50)
    inside = rope.tables(6, 2, first_position=51)
    assert all(np.shares_memory(a, b) for a, b in zip(whole, inside))  # not made again
    for got, want in zip(inside, rope_tables(6, 2, first_position=51)):
        np.testing.assert_array_equal(got, want.astype(got.dtype))  # the rows of those positions
