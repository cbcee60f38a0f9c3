"""window_attention, decoding's attention over a KV cache's ring: the backends' default against a plain loop
over each query's window, and the cpu backend's kernel against that default, on awkward inputs (odd widths and
head counts, a window of 1, passes that cross the window's end and wrap around the ring, K at its maximum).

float64 comparisons allow 1e-12 of the largest value: the same sums in another order (BLAS's blocking against
a loop). float32 ones allow 2e-6: the kernel's exp is within 2 float32 ulp of libm's (fast_exp.py), and its sums
run in another order, each a few ulp of values near 1.
"""

from __future__ import annotations

import numpy as np
import pytest

from microgpt.backends import get_backend

F64_TOL, F32_TOL = 1e-12, 2e-6  # see the module docstring


def looped(q, keys, values, start, window, scale):
    """Each query's softmax over its own window, one at a time in float64: the definition."""
    heads, n, width = q.shape
    capacity = keys.shape[1]
    out = np.zeros((heads, n, width))
    for g in range(heads):
        for i in range(n):
            positions = np.arange(max(0, start + i - window + 1), start + i + 1)
            slots = positions % capacity
            scores = keys[g, slots].astype(np.float64) @ q[g, i].astype(np.float64) * scale  # (seen,)
            probs = np.exp(scores - scores.max())
            out[g, i] = probs / probs.sum() @ values[g, slots].astype(np.float64)
    return out


def ring(rng, heads, capacity, width, dtype):
    """Keys and values (G, capacity, w), scores up to ~10 so the softmax is far from uniform."""
    return [(rng.standard_normal((heads, capacity, width)) * 2).astype(dtype) for _ in range(2)]


# (heads, width, window, drafts K): odd sizes, a width and a window of 1, and K at its maximum (window - 1)
SHAPES = [(4, 24, 64, 2), (3, 7, 13, 3), (1, 1, 5, 4), (5, 16, 1, 0), (2, 9, 6, 5)]


def cases():
    for heads, width, window, drafts in SHAPES:
        capacity = window + drafts
        for n in sorted({1, drafts + 1, max(1, drafts)}):
            # from the first position after a prompt, through the window's end, to wrapped rings
            for start in sorted({1, window - 1, window, window + 1, capacity, 3 * capacity + 1} - {0}):
                yield heads, width, window, capacity, n, start


@pytest.mark.parametrize("heads, width, window, capacity, n, start", list(cases()))
def test_the_default_and_the_cpu_kernel_match_each_querys_own_window(heads, width, window, capacity, n, start):
    rng = np.random.default_rng(heads * 1000 + start * 10 + n)
    q = rng.standard_normal((heads, n, width))
    keys, values = ring(rng, heads, capacity, width, np.float64)
    scale = 1 / np.sqrt(width)
    want = looped(q, keys, values, start, window, scale)
    for name in ("numpy", "cpu"):
        got = get_backend(name, dtype=np.float64).window_attention(q, keys, values, start, window, scale)
        np.testing.assert_allclose(got, want, rtol=0, atol=F64_TOL * np.abs(want).max(), err_msg=name)
    q32, keys32, values32 = (a.astype(np.float32) for a in (q, keys, values))
    got32 = get_backend("cpu").window_attention(q32, keys32, values32, start, window, scale)
    reference32 = get_backend("numpy").window_attention(q32, keys32, values32, start, window, scale)
    assert got32.dtype == np.float32
    np.testing.assert_allclose(got32, reference32, rtol=0, atol=F32_TOL * np.abs(reference32).max())


def test_a_querys_result_on_cpu_is_the_same_alone_or_with_drafts():
    # The kernel works query by query, so the token fed alone (plain decoding) and the same token fed with
    # drafts after it (a speculative pass) get the same bits: greedy speculative text can be plain greedy's.
    rng = np.random.default_rng(3)
    heads, width, window, drafts = 4, 24, 64, 3
    keys, values = ring(rng, heads, window + drafts, width, np.float32)
    q = rng.standard_normal((heads, drafts + 1, width)).astype(np.float32)
    cpu = get_backend("cpu")
    for start in (5, window - 2, window + 7, 5 * window):
        together = cpu.window_attention(q, keys, values, start, window, 0.2)
        for i in range(drafts + 1):
            alone = cpu.window_attention(q[:, i : i + 1].copy(), keys, values, start + i, window, 0.2)
            np.testing.assert_array_equal(alone[:, 0], together[:, i])


def test_a_pass_that_would_read_past_the_ring_is_refused():
    keys = np.zeros((1, 6, 2))
    with pytest.raises(ValueError, match="the ring holds 6"):
        get_backend("numpy", dtype=np.float64).window_attention(np.zeros((1, 3, 2)), keys, keys, 10, 5, 1.0)
