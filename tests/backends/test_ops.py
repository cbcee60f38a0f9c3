"""Every contract op of docs/ops.md, on every available backend, against plain float64 formulas.

Each test builds its inputs on the host, moves them to the backend under test
(the `backend` fixture: float32 NumPy and cpu always, float32 CUDA where a GPU is
usable, and here the CUDA backend once more on the CPU emulator, "cuda-emulated",
whose kernels run on tests/cuda_emulator), runs one op, and holds the result against a formula written here in
float64 (loops, or NumPy arranged differently from the backend's code), never
against `numpy_backend`. Expected values are computed from the float32-rounded
inputs the backend actually saw, so tolerances only have to cover the op's own
arithmetic; each tolerance sits beside its check with the reason.

Awkward cases on purpose: one row, column counts that are not multiples of 32
(1, 33, 65, 127), logits of +-1e4, repeated ids, stacked attention blocks, odd
RoPE widths and row counts that are not a multiple of the cache rows.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from backend_kinds import BACKENDS
from microgpt.backends.base import Backend
from microgpt.backends.constants import MASKED_SCORE

U32 = 2.0**-24  # float32 unit roundoff
ODD_COLS = [1, 33, 65, 127]  # not multiples of 32 (warp / tile edges on CUDA)


@pytest.fixture(params=[*BACKENDS, "cuda-emulated"])
def backend_name(request) -> str:
    """tests/conftest.py's backend kinds and the emulated CUDA backend: the whole contract on its kernels."""
    return request.param


# ---- helpers ------------------------------------------------------------------------------


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def put(backend: Backend, a) -> object:
    """Host array -> backend array of the backend's dtype."""
    return backend.from_host(np.asarray(a, dtype=np.float64))


def get(backend: Backend, a) -> np.ndarray:
    """Backend array -> float64 host copy; also checks the backend kept its own dtype."""
    host = backend.to_host(a)
    assert isinstance(host, np.ndarray)
    assert host.dtype == backend.dtype, f"got {host.dtype}, the backend's dtype is {backend.dtype}"
    return host.astype(np.float64)


def seen(backend: Backend, a: np.ndarray) -> np.ndarray:
    """The float64 values the backend holds for host array a (a rounded to its dtype)."""
    return np.asarray(a, dtype=np.float64).astype(backend.dtype).astype(np.float64)


def softmax_rtol(x: np.ndarray) -> float:
    """Relative error of a float32 softmax of rows like x, entry by entry.

    The normalising sum of `cols` terms rounds with relative error up to about cols * u;
    exp(v - max) turns the rounding of its argument (about u * (|v| + |max|)) into a relative
    error of the same size; exp itself adds a few ulp. Doubled for margin.
    """
    cols = x.shape[-1]
    return 2 * (cols + 8 + 2 * float(np.abs(x).max(initial=0.0))) * U32


def softmax_row(row) -> np.ndarray:
    """One row's softmax in float64: log-sum-exp with math.fsum, element by element."""
    m = max(row)
    exps = [math.exp(v - m) for v in row]
    total = math.fsum(exps)
    return np.array([e / total for e in exps])


def rope_theta(pos: int, pair: int, dim: int) -> float:
    return pos / 10000.0 ** (2.0 * pair / dim)


def rope_caches(dim: int, n_positions: int, odd_filler=(0.25, 0.75)) -> tuple[np.ndarray, np.ndarray]:
    """(cos, sin) caches (n_positions, dim) built by loops from the spec's formula.

    For an odd width the last column holds arbitrary values (odd_filler): the op must leave
    that column of x as it is, whatever the caches say there.
    """
    cos = np.empty((n_positions, dim))
    sin = np.empty((n_positions, dim))
    for p in range(n_positions):
        for i in range(dim // 2):
            cos[p, 2 * i] = cos[p, 2 * i + 1] = math.cos(rope_theta(p, i, dim))
            sin[p, 2 * i] = sin[p, 2 * i + 1] = math.sin(rope_theta(p, i, dim))
        if dim % 2:
            cos[p, dim - 1], sin[p, dim - 1] = odd_filler
    return cos, sin


def rope_expected(x: np.ndarray, positions, dim: int, sign: int) -> np.ndarray:
    """Rotate each pair (2i, 2i+1) of row r by sign * theta(positions[r], i); odd last column untouched."""
    out = x.copy()
    for r, p in enumerate(positions):
        for i in range(dim // 2):
            c, s = math.cos(rope_theta(p, i, dim)), sign * math.sin(rope_theta(p, i, dim))
            x0, x1 = x[r, 2 * i], x[r, 2 * i + 1]
            out[r, 2 * i] = x0 * c - x1 * s
            out[r, 2 * i + 1] = x0 * s + x1 * c
    return out


def matmul_bound(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Forward error bound of a float32 dot product of length k: about k * u * (|a| @ |b|)."""
    k = a.shape[-1]
    return 2 * (k + 2) * U32 * (np.abs(a) @ np.abs(b)) + 1e-30  # 2x margin for blocked/FMA summation orders


def assert_within(actual: np.ndarray, expected: np.ndarray, bound) -> None:
    assert actual.shape == expected.shape, f"shape {actual.shape}, expected {expected.shape}"
    err = np.abs(actual - expected)
    worst = np.unravel_index(np.argmax(err - bound), err.shape) if err.size else ()
    assert np.all(err <= bound), f"error {err[worst]} > bound {np.broadcast_to(bound, err.shape)[worst]} at {worst}"


# ---- plumbing: zeros, from_host, to_host, ids ---------------------------------------------


def test_zeros_has_shape_dtype_and_is_zero(backend):
    z = get(backend, backend.zeros((3, 33)))
    assert z.shape == (3, 33)
    assert np.all(z == 0.0)


def test_from_host_copies_and_to_host_copies(backend):
    host = _rng().normal(size=(2, 5))
    original = seen(backend, host)
    dev = put(backend, host)
    host[:] = 7.0  # changing the host source afterwards must not reach the backend copy
    back = backend.to_host(dev)
    np.testing.assert_array_equal(back, original)
    back[:] = -1.0  # nor may changing the host result reach the backend array
    assert np.all(get(backend, dev) != -1.0)


def test_from_host_rounds_to_backend_dtype(backend):
    x = np.array([[1.0 + 2.0**-30, 3.0]])  # not representable in float32
    np.testing.assert_array_equal(get(backend, put(backend, x)), seen(backend, x))


def test_ids_are_int32_with_same_values(backend):
    ids = np.array([3, 0, 3, 6, 1], dtype=np.int64)
    dev = backend.ids(ids)
    host = np.asarray(backend.to_host(dev))
    assert host.dtype == np.int32
    np.testing.assert_array_equal(host, ids)


# ---- linear algebra -----------------------------------------------------------------------


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (1, 33, 5), (4, 65, 3), (7, 127, 33), (5, 3, 1)])
@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize("transpose_b", [False, True])
def test_matmul_with_transpose_flags(backend, m, k, n, transpose_a, transpose_b):
    rng = _rng(m * 1000 + k * 10 + n)
    a = seen(backend, rng.normal(size=(m, k)))
    b = seen(backend, rng.normal(size=(k, n)))
    a_stored = a.T.copy() if transpose_a else a  # what the caller holds: op(a_stored) == a
    b_stored = b.T.copy() if transpose_b else b
    out = backend.matmul(put(backend, a_stored), put(backend, b_stored), transpose_a, transpose_b)
    expected = np.einsum("ik,kj->ij", a, b)
    assert_within(get(backend, out), expected, matmul_bound(a, b))


def test_matmul_shape_mismatch_is_a_clear_value_error(backend):
    a, b = backend.zeros((2, 3)), backend.zeros((4, 5))
    with pytest.raises(ValueError) as info:
        backend.matmul(a, b)
    message = str(info.value)
    assert "(2, 3)" in message and "(4, 5)" in message, f"the error should name both shapes: {message!r}"


def test_matmul_shape_mismatch_with_transpose_flag(backend):
    # (3, 2) transposed is (2, 3): it does not chain with (2, 4) ... but (3, 2) @ (2, 4) would.
    with pytest.raises(ValueError):
        backend.matmul(backend.zeros((3, 2)), backend.zeros((2, 4)), transpose_a=True)


@pytest.mark.parametrize("transpose_a,transpose_b", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("accumulate", [False, True])
def test_matmul_into_writes_dst_in_place(backend, transpose_a, transpose_b, accumulate):
    rng = _rng(3)
    m, k, n = 5, 33, 7
    a = seen(backend, rng.normal(size=(m, k)))
    b = seen(backend, rng.normal(size=(k, n)))
    start = seen(backend, rng.normal(size=(m, n)))
    dst = put(backend, start)
    view = dst[:]  # a view of dst's memory: sees the result only if dst is written in place
    result = backend.matmul_into(
        put(backend, a.T.copy() if transpose_a else a),
        put(backend, b.T.copy() if transpose_b else b),
        dst, transpose_a=transpose_a, transpose_b=transpose_b, accumulate=accumulate,
    )
    assert result is None
    expected = np.einsum("ik,kj->ij", a, b) + (start if accumulate else 0.0)
    # the product's bound, plus one rounding of the final add when accumulating
    bound = matmul_bound(a, b) + (2 * U32 * np.abs(expected) if accumulate else 0.0)
    assert_within(get(backend, view), expected, bound)
    assert_within(get(backend, dst), expected, bound)


def test_matmul_into_rejects_wrong_dst_shape(backend):
    with pytest.raises(ValueError):
        backend.matmul_into(backend.zeros((2, 3)), backend.zeros((3, 4)), backend.zeros((2, 5)))


@pytest.mark.parametrize("transpose_a,transpose_b", [(False, False), (True, False), (False, True), (True, True)])
def test_bmm_is_a_product_per_batch_entry(backend, transpose_a, transpose_b):
    rng = _rng(4)
    batch, m, k, n = 6, 5, 33, 3
    a = seen(backend, rng.normal(size=(batch, m, k)))
    b = seen(backend, rng.normal(size=(batch, k, n)))
    a_stored = np.ascontiguousarray(a.transpose(0, 2, 1)) if transpose_a else a
    b_stored = np.ascontiguousarray(b.transpose(0, 2, 1)) if transpose_b else b
    out = get(backend, backend.bmm(put(backend, a_stored), put(backend, b_stored), transpose_a, transpose_b))
    assert out.shape == (batch, m, n)
    for i in range(batch):  # one plain product per entry
        assert_within(out[i], a[i] @ b[i], matmul_bound(a[i], b[i]))


@pytest.mark.parametrize("transpose_a,transpose_b", [(False, False), (True, False), (False, True), (True, True)])
def test_batched_matmul_list_api(backend, transpose_a, transpose_b):
    rng = _rng(5)
    m, k, n = 4, 65, 2
    a_list = [seen(backend, rng.normal(size=(m, k))) for _ in range(3)]
    b_list = [seen(backend, rng.normal(size=(k, n))) for _ in range(3)]
    out = backend.batched_matmul(
        [put(backend, a.T.copy() if transpose_a else a) for a in a_list],
        [put(backend, b.T.copy() if transpose_b else b) for b in b_list],
        transpose_a, transpose_b,
    )
    assert isinstance(out, list) and len(out) == 3
    for got, a, b in zip(out, a_list, b_list):
        assert_within(get(backend, got), np.einsum("ik,kj->ij", a, b), matmul_bound(a, b))


def test_batched_matmul_empty_and_mismatched_lists(backend):
    assert backend.batched_matmul([], [], False, False) == []
    with pytest.raises(ValueError):
        backend.batched_matmul([backend.zeros((2, 2))], [], False, False)


@pytest.mark.parametrize("rows,cols", [(1, 1), (1, 33), (3, 65), (127, 2)])
def test_transpose_is_new_and_contiguous(backend, rows, cols):
    x = _rng(6).normal(size=(rows, cols))
    dev = put(backend, x)
    t = backend.transpose(dev)
    assert t.shape == (cols, rows)
    assert t.flags.c_contiguous
    backend.scale_(dev, 0.0)  # a new array: zeroing the source must not change it
    np.testing.assert_array_equal(get(backend, t), seen(backend, x).T)  # a copy is exact


def test_add_and_scale_make_new_arrays(backend):
    rng = _rng(7)
    a, b = seen(backend, rng.normal(size=(3, 33))), seen(backend, rng.normal(size=(3, 33)))
    da, db = put(backend, a), put(backend, b)
    total = backend.add(da, db)
    scaled = backend.scale(da, -0.37)
    # one float32 rounding of each result element
    np.testing.assert_allclose(get(backend, total), a + b, rtol=U32, atol=0)
    np.testing.assert_allclose(get(backend, scaled), a * -0.37, rtol=2 * U32, atol=0)  # also rounds 0.37
    np.testing.assert_array_equal(get(backend, da), a)  # inputs unchanged
    np.testing.assert_array_equal(get(backend, db), b)


def test_add_and_scale_in_place_write_the_same_object(backend):
    rng = _rng(8)
    a, b = seen(backend, rng.normal(size=(4, 65))), seen(backend, rng.normal(size=(4, 65)))
    da, db = put(backend, a), put(backend, b)
    view = da[:]  # shares da's memory: it sees the result only if da itself is overwritten
    assert backend.add_(da, db) is None
    np.testing.assert_allclose(get(backend, view), a + b, rtol=U32, atol=0)  # one rounding per element
    assert backend.scale_(da, 2.5) is None
    np.testing.assert_allclose(get(backend, view), (a + b) * 2.5, rtol=3 * U32, atol=0)  # two roundings
    np.testing.assert_array_equal(get(backend, db), b)


@pytest.mark.parametrize("rows,cols", [(1, 1), (1, 33), (9, 65), (127, 3)])
def test_sum_rows_gives_column_sums(backend, rows, cols):
    x = seen(backend, _rng(9).normal(size=(rows, cols)))
    out = get(backend, backend.sum_rows(put(backend, x)))
    expected = np.array([[math.fsum(x[:, j]) for j in range(cols)]])
    # float32 sum of `rows` terms: error below rows * u * sum|x|
    bound = 2 * (rows + 1) * U32 * np.abs(x).sum(axis=0, keepdims=True)
    assert_within(out, expected, bound)


# ---- softmax and masks --------------------------------------------------------------------


@pytest.mark.parametrize("rows,cols", [(1, 1), (1, 33), (4, 65), (3, 127), (2, 5)])
def test_softmax_rows(backend, rows, cols):
    x = seen(backend, _rng(10).normal(scale=3.0, size=(rows, cols)))
    out = get(backend, backend.softmax_rows(put(backend, x)))
    expected = np.stack([softmax_row(row) for row in x])
    np.testing.assert_allclose(out, expected, rtol=softmax_rtol(x), atol=1e-30)  # see softmax_rtol


def test_softmax_rows_large_logits_do_not_overflow(backend):
    x = np.array([
        [1e4, 1e4 - 1.0, -1e4, 0.0],
        [-1e4, -1e4, -1e4, -1e4],  # all equal: uniform
        [1e4, -1e4, -1e4, -1e4],  # one-hot
    ])
    out = get(backend, backend.softmax_rows(put(backend, x)))
    assert np.all(np.isfinite(out))
    expected = np.stack([softmax_row(row) for row in seen(backend, x)])
    # a few roundings in exp and the sum of 4 terms; exp(-2e4) underflows to exactly 0 in both
    np.testing.assert_allclose(out, expected, rtol=16 * U32, atol=1e-30)
    np.testing.assert_allclose(out[1], [0.25] * 4, rtol=4 * U32)


@pytest.mark.parametrize("rows,cols", [(1, 1), (1, 33), (5, 65), (2, 127)])
def test_softmax_backward(backend, rows, cols):
    rng = _rng(11)
    s = np.stack([softmax_row(r) for r in rng.normal(size=(rows, cols))])
    s, ds = seen(backend, s), seen(backend, rng.normal(size=(rows, cols)))
    out = get(backend, backend.softmax_backward(put(backend, s), put(backend, ds)))
    # the row's Jacobian of softmax is diag(s) - s s^T (symmetric): grad = J @ ds
    expected = np.stack([(np.diag(sr) - np.outer(sr, sr)) @ dr for sr, dr in zip(s, ds)])
    # the row sum of `cols` products rounds with relative error about cols * u; s <= 1, |ds| ~ 1
    atol = 2 * (cols + 2) * U32 * np.abs(ds).max() * s + 1e-30
    assert_within(out, expected, atol)


@pytest.mark.parametrize("rows,cols", [(5, 5), (1, 1), (1, 4), (4, 7), (7, 3)])
def test_causal_mask_single_block(backend, rows, cols):
    x = seen(backend, _rng(12).normal(size=(rows, cols)))
    dev = put(backend, x)
    assert backend.causal_mask(dev) is None
    expected = x.copy()
    for i in range(rows):
        for j in range(cols):
            if j > i:
                expected[i, j] = MASKED_SCORE
    np.testing.assert_array_equal(get(backend, dev), expected)  # copies and a constant: exact


@pytest.mark.parametrize("blocks,seq_len", [(1, 4), (3, 4), (2, 33), (5, 1), (4, 7)])
def test_causal_mask_batched_stacked_blocks(backend, blocks, seq_len):
    x = seen(backend, _rng(13).normal(size=(blocks * seq_len, seq_len)))
    dev = put(backend, x)
    view = dev[:]
    assert backend.causal_mask_batched(dev, seq_len) is None
    expected = x.copy()
    for i in range(blocks * seq_len):
        for j in range(seq_len):
            if j > i % seq_len:
                expected[i, j] = MASKED_SCORE
    np.testing.assert_array_equal(get(backend, view), expected)  # exact: in place, copies and a constant


# ---- element-wise ops ---------------------------------------------------------------------


@pytest.mark.parametrize("rows", [1, 6])
@pytest.mark.parametrize("cols", ODD_COLS)
def test_bias_add_in_place(backend, rows, cols):
    rng = _rng(14)
    x, bias = seen(backend, rng.normal(size=(rows, cols))), seen(backend, rng.normal(size=(1, cols)))
    dev = put(backend, x)
    view = dev[:]
    assert backend.bias_add(dev, put(backend, bias)) is None
    expected = np.array([[x[i, j] + bias[0, j] for j in range(cols)] for i in range(rows)])
    np.testing.assert_allclose(get(backend, view), expected, rtol=U32, atol=0)  # one rounding per add


def _relu_input(rows: int, cols: int, seed: int) -> np.ndarray:
    x = _rng(seed).normal(size=(rows, cols))
    x.flat[:: 3] = 0.0  # exact zeros: the mask is 0.0 there (x > 0 is false)
    return x


@pytest.mark.parametrize("rows,cols", [(1, 1), (1, 33), (4, 65), (3, 127)])
def test_relu_forward_and_backward(backend, rows, cols):
    x = seen(backend, _relu_input(rows, cols, 15))
    out, mask = backend.relu_forward(put(backend, x))
    out, mask = get(backend, out), get(backend, mask)
    expected_mask = np.array([[1.0 if v > 0 else 0.0 for v in row] for row in x])
    np.testing.assert_array_equal(mask, expected_mask)  # exact: comparisons and copies
    np.testing.assert_array_equal(out, np.where(x > 0, x, 0.0))
    grad = seen(backend, _rng(16).normal(size=(rows, cols)))
    back = get(backend, backend.relu_backward(put(backend, grad), put(backend, expected_mask)))
    np.testing.assert_array_equal(back, grad * expected_mask)  # exact: products with 0 and 1


@pytest.mark.parametrize("rows,cols", [(1, 1), (1, 33), (5, 65), (2, 127)])
def test_fused_bias_relu_default_and_override_agree_with_formula(backend, rows, cols):
    x = seen(backend, _relu_input(rows, cols, 17))
    bias = seen(backend, _rng(18).normal(size=(1, cols)))
    bias[0, 0] = -x[0, 0]  # an exact zero after the add: mask 0 there
    fused_out, fused_mask = backend.fused_bias_relu(put(backend, x), put(backend, bias))
    default_out, default_mask = Backend.fused_bias_relu(backend, put(backend, x), put(backend, bias))
    pre = seen(backend, x + bias)  # the float32-rounded sum, as both paths compute it
    expected_mask = (pre > 0).astype(np.float64)
    for out, mask in ((fused_out, fused_mask), (default_out, default_mask)):
        np.testing.assert_array_equal(get(backend, mask), expected_mask)  # exact: one rounding, then compare
        np.testing.assert_array_equal(get(backend, out), pre * expected_mask)


# ---- layer norm ---------------------------------------------------------------------------


def layer_norm_expected(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray):
    """(out, norm, std_inv) row by row with math.fsum."""
    rows, cols = x.shape
    out, norm, std_inv = np.empty_like(x), np.empty_like(x), np.empty((rows, 1))
    for i in range(rows):
        mean = math.fsum(x[i]) / cols
        var = math.fsum((v - mean) ** 2 for v in x[i]) / cols  # biased
        std_inv[i, 0] = 1.0 / math.sqrt(var + 1e-5)
        norm[i] = (x[i] - mean) * std_inv[i, 0]
        out[i] = norm[i] * gamma[0] + beta[0]
    return out, norm, std_inv


@pytest.mark.parametrize("rows,cols", [(1, 1), (1, 33), (4, 65), (3, 127), (6, 8)])
def test_layer_norm_forward(backend, rows, cols):
    rng = _rng(19)
    x = seen(backend, rng.normal(loc=2.0, scale=1.5, size=(rows, cols)))  # an offset mean: cancellation
    gamma = seen(backend, rng.normal(loc=1.0, size=(1, cols)))
    beta = seen(backend, rng.normal(size=(1, cols)))
    out, norm, std_inv = backend.layer_norm_forward(put(backend, x), put(backend, gamma), put(backend, beta))
    e_out, e_norm, e_std_inv = layer_norm_expected(x, gamma, beta)
    assert get(backend, std_inv).shape == (rows, 1)
    # mean and variance are float32 sums of `cols` terms (relative error about cols * u on the
    # variance); the norm then carries an absolute error about |x - mean| * std_inv * cols * u
    tol = 4 * (cols + 8) * U32
    np.testing.assert_allclose(get(backend, std_inv), e_std_inv, rtol=tol)
    assert_within(get(backend, norm), e_norm, tol * (1 + np.abs(e_norm)))
    assert_within(get(backend, out), e_out, tol * (1 + np.abs(e_norm)) * np.abs(gamma) + 2 * U32 * np.abs(e_out))


def test_layer_norm_forward_constant_row_uses_eps(backend):
    x = np.full((2, 33), 3.0)  # zero variance: std_inv = 1/sqrt(eps), norm 0, out = beta
    gamma = np.full((1, 33), 2.0)
    beta = _rng(20).normal(size=(1, 33))
    out, norm, std_inv = backend.layer_norm_forward(put(backend, x), put(backend, gamma), put(backend, beta))
    np.testing.assert_allclose(get(backend, std_inv), 1.0 / math.sqrt(1e-5), rtol=4 * U32)  # sqrt + divide
    np.testing.assert_array_equal(get(backend, norm), 0.0)  # 3.0 - 3.0 is exactly 0
    np.testing.assert_array_equal(get(backend, out), np.broadcast_to(seen(backend, beta), (2, 33)))


@pytest.mark.parametrize("rows,cols", [(1, 1), (1, 33), (4, 65), (2, 127), (5, 8)])
def test_layer_norm_backward(backend, rows, cols):
    rng = _rng(21)
    x = rng.normal(size=(rows, cols))
    _, norm, std_inv = layer_norm_expected(x, np.ones((1, cols)), np.zeros((1, cols)))
    norm, std_inv = seen(backend, norm), seen(backend, std_inv)
    grad = seen(backend, rng.normal(size=(rows, cols)))
    gamma = seen(backend, rng.normal(loc=1.0, size=(1, cols)))
    dx, dgamma, dbeta = backend.layer_norm_backward(
        put(backend, grad), put(backend, norm), put(backend, std_inv), put(backend, gamma)
    )
    dx, dgamma, dbeta = get(backend, dx), get(backend, dgamma), get(backend, dbeta)
    assert dgamma.shape == (1, cols) and dbeta.shape == (1, cols)
    # dx through the explicit Jacobian of norm(x): d norm_j / d x_i = std_inv (delta_ij - 1/n - norm_i norm_j / n)
    expected_dx = np.empty_like(grad)
    for i in range(rows):
        jac = std_inv[i, 0] * (np.eye(cols) - 1.0 / cols - np.outer(norm[i], norm[i]) / cols)
        expected_dx[i] = jac @ (grad[i] * gamma[0])
    expected_dgamma = np.array([[math.fsum(grad[:, j] * norm[:, j]) for j in range(cols)]])
    expected_dbeta = np.array([[math.fsum(grad[:, j]) for j in range(cols)]])
    # row means of `cols` float32 terms scaled by std_inv: absolute error about cols * u * std_inv * |terms|
    scale = std_inv * (np.abs(grad * gamma).max(axis=1, keepdims=True) * (1 + np.abs(norm).max()) ** 2)
    assert_within(dx, expected_dx, 4 * (cols + 4) * U32 * scale)
    # column sums of `rows` float32 terms
    assert_within(dgamma, expected_dgamma, 2 * (rows + 2) * U32 * np.abs(grad * norm).sum(axis=0, keepdims=True))
    assert_within(dbeta, expected_dbeta, 2 * (rows + 2) * U32 * np.abs(grad).sum(axis=0, keepdims=True))


# ---- Adam -----------------------------------------------------------------------------------


def test_adam_step_t1_from_zero_moments(backend):
    # t = 1, m = v = 0: m = 0.1 g, v = 0.001 g^2, m_hat = g, v_hat = g^2,
    # so the step is lr * g / (|g| + 1e-8): about lr * sign(g), exactly lr / 2 at |g| = 1e-8, 0 at g = 0
    lr = 0.01
    param = np.array([[1.0, -2.0, 0.5, 3.0, 0.25]])
    grad = np.array([[0.3, -4.0, 0.0, 1e-8, -1e-8]])
    p_dev, g_dev = put(backend, param), put(backend, grad)
    m_dev, v_dev = backend.zeros((1, 5)), backend.zeros((1, 5))
    p_view = p_dev[:]
    assert backend.adam_step(p_dev, g_dev, m_dev, v_dev, lr, 1) is None
    g = seen(backend, grad)
    expected_param = np.array([[1.0 - 0.01 * 0.3 / (0.3 + 1e-8), -2.0 + 0.01 * 4.0 / (4.0 + 1e-8), 0.5,
                                3.0 - 0.005, 0.25 + 0.005]])
    # a handful of float32 roundings on values of size <= 3
    np.testing.assert_allclose(get(backend, p_view), expected_param, rtol=0, atol=16 * U32 * 3)
    np.testing.assert_allclose(get(backend, m_dev), 0.1 * g, rtol=4 * U32, atol=0)  # two roundings
    # v = 0.001 g^2: relative roundings, also near 1e-19 where float32 is still normal
    np.testing.assert_allclose(get(backend, v_dev), 0.001 * g * g, rtol=6 * U32, atol=0)
    np.testing.assert_array_equal(get(backend, g_dev), g)  # the gradient is left as it is


def test_adam_step_t5_with_existing_moments(backend):
    rng = _rng(22)
    n = 33
    param = seen(backend, rng.normal(size=(1, n)))
    grad = seen(backend, rng.normal(size=(1, n)))
    m0 = seen(backend, rng.normal(scale=0.1, size=(1, n)))
    v0 = seen(backend, rng.uniform(0.0, 0.05, size=(1, n)))
    lr, t = 3e-3, 5
    devs = [put(backend, a) for a in (param, grad, m0, v0)]
    backend.adam_step(*devs, lr, t)
    expected_p, expected_m, expected_v = param.copy(), m0.copy(), v0.copy()
    for j in range(n):  # Adam, one scalar at a time
        g = grad[0, j]
        expected_m[0, j] = 0.9 * m0[0, j] + 0.1 * g
        expected_v[0, j] = 0.999 * v0[0, j] + 0.001 * g * g
        m_hat = expected_m[0, j] / (1 - 0.9**t)
        v_hat = expected_v[0, j] / (1 - 0.999**t)
        expected_p[0, j] = param[0, j] - lr * m_hat / (math.sqrt(v_hat) + 1e-8)
    # a few float32 roundings per element; the step itself is O(lr * few) and rounds relatively
    np.testing.assert_allclose(get(backend, devs[2]), expected_m, rtol=8 * U32, atol=8 * U32 * 0.1)
    np.testing.assert_allclose(get(backend, devs[3]), expected_v, rtol=8 * U32, atol=0)
    assert_within(get(backend, devs[0]), expected_p, 8 * U32 * (np.abs(param) + 1))


# ---- RoPE -----------------------------------------------------------------------------------


@pytest.mark.parametrize("dim", [1, 2, 3, 8, 33, 65])
@pytest.mark.parametrize("rows,n_cache,first", [
    (12, 4, 0),  # three stacked blocks of 4 positions (cache[:4])
    (7, 3, 0),  # rows not a multiple of the cache rows: row r uses cache row r % 3
    (1, 1, 5),  # one new token at position 5 (cache[5:6])
    (3, 1, 2),  # three rows, all at position 2
    (5, 5, 0),  # one block
])
def test_rope_apply_and_inverse(backend, dim, rows, n_cache, first):
    cos, sin = rope_caches(dim, first + n_cache + 2)  # longer than needed: the op gets a slice
    cos_dev, sin_dev = put(backend, cos), put(backend, sin)
    cos_slice, sin_slice = cos_dev[first : first + n_cache], sin_dev[first : first + n_cache]
    x = seen(backend, _rng(23 + dim).normal(size=(rows, dim)))
    positions = [first + r % n_cache for r in range(rows)]
    dev = put(backend, x)
    view = dev[:]
    assert backend.rope_apply(dev, cos_slice, sin_slice) is None
    rotated = get(backend, view)
    # a 2x2 rotation: two products and a sum, plus the float32 rounding of cos and sin
    atol = 8 * U32 * (np.abs(x).max() + 1)
    np.testing.assert_allclose(rotated, rope_expected(x, positions, dim, +1), rtol=0, atol=atol)
    if dim % 2:
        np.testing.assert_array_equal(rotated[:, -1], x[:, -1])  # the odd last column is left exactly as it is
    backend.rope_apply_inverse(dev, cos_slice, sin_slice)
    np.testing.assert_allclose(get(backend, dev), x, rtol=0, atol=2 * atol)  # inverse undoes: twice the error

    dev2 = put(backend, x)
    backend.rope_apply_inverse(dev2, cos_slice, sin_slice)
    np.testing.assert_allclose(get(backend, dev2), rope_expected(x, positions, dim, -1), rtol=0, atol=atol)


def test_rope_width_one_is_identity(backend):
    cos, sin = rope_caches(1, 4)
    x = _rng(24).normal(size=(8, 1))
    dev = put(backend, x)
    backend.rope_apply(dev, put(backend, cos), put(backend, sin))
    np.testing.assert_array_equal(get(backend, dev), seen(backend, x))  # nothing to rotate: exact


def test_rope_tables_match_the_spec_formula():
    """The model's tables hold what rope_caches builds here (odd last column: cos 1, sin 0)."""
    from microgpt.model.rope import rope_tables

    for dim in (1, 2, 7, 8):
        cos, sin = rope_tables(dim, 6)
        e_cos, e_sin = rope_caches(dim, 6, odd_filler=(1.0, 0.0))
        np.testing.assert_allclose(cos, e_cos, rtol=0, atol=1e-15)  # float64 both ways
        np.testing.assert_allclose(sin, e_sin, rtol=0, atol=1e-15)
        later, _ = rope_tables(dim, 2, first_position=4)
        np.testing.assert_allclose(later, e_cos[4:6], rtol=0, atol=1e-15)


# ---- fused attention softmax ----------------------------------------------------------------


def attn_softmax_expected(scores: np.ndarray, scale: float) -> np.ndarray:
    """Row i of stacked (T, T) blocks sees positions 0..i % T; loops over the visible part only."""
    rows, t = scores.shape
    out = np.zeros_like(scores)
    for i in range(rows):
        p = i % t
        out[i, : p + 1] = softmax_row(list(scores[i, : p + 1] * scale))
    return out


@pytest.mark.parametrize("blocks,t", [(1, 1), (3, 4), (2, 33), (1, 65), (2, 127)])
def test_fused_attn_softmax(backend, blocks, t):
    scale = 0.37
    x = seen(backend, _rng(25).normal(scale=4.0, size=(blocks * t, t)))
    x_dev = put(backend, x)
    fused = get(backend, backend.fused_attn_softmax(x_dev, scale))
    np.testing.assert_array_equal(get(backend, x_dev), x)  # the scores are not changed
    rtol = softmax_rtol(x * scale) + 2 * U32  # see softmax_rtol; plus the rounding of scale * x
    np.testing.assert_allclose(fused, attn_softmax_expected(x, scale), rtol=rtol, atol=1e-30)
    # the same as the separate ops: softmax_rows(causal_mask_batched(scale * x))
    separate = backend.scale(x_dev, scale)
    backend.causal_mask_batched(separate, t)
    separate = get(backend, backend.softmax_rows(separate))
    np.testing.assert_allclose(fused, separate, rtol=rtol, atol=1e-30)
    default = get(backend, Backend.fused_attn_softmax(backend, x_dev, scale))
    np.testing.assert_allclose(fused, default, rtol=rtol, atol=1e-30)


def test_fused_attn_softmax_large_logits(backend):
    x = np.array([
        [1e4, -1e4, 1e4, 1e4],  # position 0: only itself, whatever the future holds
        [1e4, -1e4, 1e4, 1e4],  # position 1: one-hot on column 0
        [-1e4, 1e4 - 2.0, 1e4, 5.0],  # position 2: two large ones 2 apart
        [1e4, 1e4, 1e4, 1e4],  # position 3: uniform
    ] * 2)  # two stacked blocks
    out = get(backend, backend.fused_attn_softmax(put(backend, x), 1.0))
    assert np.all(np.isfinite(out))
    # a few roundings of exp and a 4-term sum; exp(-2e4) is exactly 0 in both
    np.testing.assert_allclose(out, attn_softmax_expected(seen(backend, x), 1.0), rtol=16 * U32, atol=1e-30)
    np.testing.assert_array_equal(out[0], [1.0, 0.0, 0.0, 0.0])  # one visible entry: exactly 1


def test_a_nan_score_or_logit_is_seen(backend):
    scores = np.ones((4, 4))
    scores[2, 1] = np.nan  # visible from position 2 only
    out = get(backend, backend.fused_attn_softmax(put(backend, scores), 1.0))
    assert np.all(np.isnan(out[2, :3])) and np.all(np.isfinite(out[[0, 1, 3]]))  # the future key may be 0
    logits = np.zeros((2, 20))
    logits[0, 5] = np.nan  # not a target
    loss, _ = backend.fused_softmax_ce_grad(put(backend, logits), backend.ids(np.array([1, 2])))
    assert math.isnan(loss)


@pytest.mark.parametrize("blocks,t", [(1, 1), (3, 4), (2, 33), (1, 127)])
def test_fused_attn_softmax_backward(backend, blocks, t):
    rng = _rng(26)
    scale = 0.5
    s = seen(backend, attn_softmax_expected(rng.normal(size=(blocks * t, t)), 1.0))
    ds = seen(backend, rng.normal(size=(blocks * t, t)))
    fused = get(backend, backend.fused_attn_softmax_backward(put(backend, s), put(backend, ds), scale))
    expected = np.stack([scale * ((np.diag(sr) - np.outer(sr, sr)) @ dr) for sr, dr in zip(s, ds)])
    # a row sum of t products (relative error ~ t * u), times s <= 1 and the scale
    atol = 2 * (t + 4) * U32 * np.abs(ds).max() * s * scale + 1e-30
    assert_within(fused, expected, atol)
    unfused = backend.softmax_backward(put(backend, s), put(backend, ds))
    backend.scale_(unfused, scale)
    assert_within(fused, get(backend, unfused), 2 * atol)  # both within atol of the exact value
    default = get(backend, Backend.fused_attn_softmax_backward(backend, put(backend, s), put(backend, ds), scale))
    assert_within(fused, default, 2 * atol)


def causal_attention_expected(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float) -> np.ndarray:
    """float64 attention, query by query: query i of Tq sees keys 0 .. Tk - Tq + i."""
    n, tq, _ = q.shape
    tk = k.shape[1]
    out = np.zeros(q.shape)
    for h in range(n):
        for i in range(tq):
            visible = tk - tq + i + 1
            probs = softmax_row(list(q[h, i] @ k[h, :visible].T * scale))
            out[h, i] = probs @ v[h, :visible]
    return out


def attention_atol(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float) -> float:
    """The float32 error of attention over these inputs: the softmax's relative error (see softmax_rtol) spread
    over a Tk-term weighted sum of |v|, plus the rounding of the w-term scores (w * u relative, times |q||k|,
    amplified by exp)."""
    w, tk = q.shape[2], k.shape[1]
    scores = np.abs(np.einsum("ntw,nsw->nts", q, k)) * scale
    return (softmax_rtol(scores) + 2 * (w + tk) * U32 * (1 + scores.max())) * np.abs(v).max()


# (heads, T, width): one position, T and widths not multiples of 32, a width of 1
@pytest.mark.parametrize("n,t,w", [(1, 1, 1), (3, 5, 3), (2, 33, 16), (1, 65, 7)])
def test_causal_attention(backend, n, t, w):
    rng = _rng(31)
    q, k, v = (seen(backend, rng.normal(scale=1.5, size=(n, t, w))) for _ in range(3))
    scale = 1.0 / math.sqrt(w)
    out, _ = backend.causal_attention(put(backend, q), put(backend, k), put(backend, v), scale)
    expected = causal_attention_expected(q, k, v, scale)
    assert_within(get(backend, out), expected, attention_atol(q, k, v, scale))  # see attention_atol


def test_a_nan_query_is_seen_in_attention(backend):
    # T = 64 (from there the cpu backend splits the queries in halves): a NaN query in each half gives a NaN
    # output row; every other row stays finite
    rng = _rng(34)
    q, k, v = (seen(backend, rng.normal(size=(2, 64, 4))) for _ in range(3))
    q[1, 5, 0] = q[1, 40, 1] = np.nan
    out = get(backend, backend.causal_attention(put(backend, q), put(backend, k), put(backend, v), 0.5)[0])
    assert np.all(np.isnan(out[1, [5, 40]]))
    assert np.all(np.isfinite(np.delete(out[1], [5, 40], axis=0))) and np.all(np.isfinite(out[0]))


@pytest.mark.parametrize("n,held,w", [(1, 1, 4), (2, 9, 3), (4, 40, 16)])
def test_causal_attention_one_query_sees_every_key(backend, n, held, w):
    rng = _rng(32)
    q = seen(backend, rng.normal(size=(n, 1, w)))
    k, v = (seen(backend, rng.normal(size=(n, held, w))) for _ in range(2))
    out, _ = backend.causal_attention(put(backend, q), put(backend, k), put(backend, v), 0.5)
    assert_within(get(backend, out), causal_attention_expected(q, k, v, 0.5), attention_atol(q, k, v, 0.5))


# (heads, Tk, width, Tq): one, two and three new queries against a cache, and the square case; Tk of one and two,
# 65 (past the cpu backend's halves), odd widths and a width of 1
@pytest.mark.parametrize("n,tk,w,tq", [
    (1, 1, 1, 1), (2, 2, 3, 1), (2, 2, 3, 2), (3, 5, 3, 1), (3, 5, 3, 2), (3, 5, 3, 3), (3, 5, 3, 5),
    (1, 9, 1, 2), (2, 33, 16, 3), (1, 65, 7, 1), (1, 65, 7, 2), (1, 65, 7, 3), (1, 65, 7, 65),
])
def test_causal_attention_new_queries_against_a_cache(backend, n, tk, w, tq):
    """Tq queries at positions Tk - Tq .. Tk - 1 against Tk keys: the loop reference, and the last Tq rows of the
    square attention over all Tk positions (which every backend computes on its own path: flash, halves)."""
    rng = _rng(35)
    every_query, k, v = (seen(backend, rng.normal(scale=1.5, size=(n, tk, w))) for _ in range(3))  # (n, Tk, w) each
    q = every_query[:, tk - tq :]  # (n, Tq, w): the newest positions' queries
    scale = 1.0 / math.sqrt(w)
    keys = put(backend, k), put(backend, v)
    out = get(backend, backend.causal_attention(put(backend, q), *keys, scale)[0])
    atol = attention_atol(q, k, v, scale)  # see attention_atol
    assert_within(out, causal_attention_expected(q, k, v, scale), atol)
    square = get(backend, backend.causal_attention(put(backend, every_query), *keys, scale)[0])  # (n, Tk, w)
    assert_within(out, square[:, tk - tq :], 2 * atol)  # both within atol of the exact value


@pytest.mark.parametrize("tq,tk", [(3, 2), (2, 1)])
def test_causal_attention_needs_no_more_queries_than_keys(backend, tq, tk):
    q, kv = backend.zeros((2, tq, 4)), backend.zeros((2, tk, 4))
    with pytest.raises(ValueError, match=f"{tq} queries against {tk} keys"):
        backend.causal_attention(q, kv, kv, 0.5)


@pytest.mark.parametrize("n,t,w", [(1, 1, 2), (3, 4, 5), (2, 33, 8), (2, 64, 16), (1, 65, 7)])
def test_causal_attention_backward_matches_the_default(backend, n, t, w):
    """The backend's (possibly fused) backward against the materialised default, on the default's saved
    probabilities: dq, dk and dv agree within float32 summation error."""
    rng = _rng(33)
    q, k, v, dout = (seen(backend, rng.normal(size=(n, t, w))) for _ in range(4))
    scale = 1.0 / math.sqrt(w)
    args = [put(backend, a) for a in (q, k, v)]
    _, saved = backend.causal_attention(*args, scale)
    grads = backend.causal_attention_backward(put(backend, dout), saved, scale)
    _, default_saved = Backend.causal_attention(backend, *args, scale)
    defaults = Backend.causal_attention_backward(backend, put(backend, dout), default_saved, scale)
    atol = 8 * (t + w) * U32 * (1 + np.abs(q).max() * np.abs(k).max() * w) * np.abs(dout).max() * np.abs(v).max()
    for name, got, want in zip(("dq", "dk", "dv"), grads, defaults):
        assert get(backend, got).shape == (n, t, w), name
        assert_within(get(backend, got), get(backend, want), atol)


# ---- gap attention: the `gap` keys right after each query hidden -------------------------------------


def gap_visible(t: int, gap: int, i: int) -> list[int]:
    """The keys query i of t sees: 0 .. i, and those after its gap (i + gap + 1 .. t - 1)."""
    return [j for j in range(t) if j <= i or j >= i + gap + 1]


def gap_attention_expected(q, k, v, dout, scale, gap):
    """((out, dq, dk, dv), probs) in float64, query by query over its visible keys only; probs (n, T, T) holds
    each query's probabilities, 0 at the keys it does not see."""
    n, t, _ = q.shape
    out, dq, dk, dv = (np.zeros(q.shape) for _ in range(4))
    probs = np.zeros((n, t, t))
    for h in range(n):
        for i in range(t):
            keys = gap_visible(t, gap, i)
            probs[h, i, keys] = softmax_row(list(q[h, i] @ k[h, keys].T * scale))
            out[h, i] = probs[h, i, keys] @ v[h, keys]
            dprobs = v[h, keys] @ dout[h, i]
            dscores = probs[h, i, keys] * (dprobs - probs[h, i, keys] @ dprobs) * scale  # the softmax's backward
            dq[h, i] = dscores @ k[h, keys]
            dk[h, keys] += np.outer(dscores, q[h, i])
            dv[h, keys] += np.outer(probs[h, i, keys], dout[h, i])
    return (out, dq, dk, dv), probs


def attention_grad_bounds(q, k, v, dout, scale, probs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Entry by entry error bounds of float32 (dq, dk, dv) for the exact probabilities probs (n, T, T): each
    gradient computed on absolute values (|dP| = |dout| |v|^T, |dS| = scale P (|dP| + rowsum(P |dP|)), then
    |dS| |k|, |dS|^T |q| and P^T |dout|), times the relative error of the steps: the probabilities' (see
    softmax_rtol, plus the rounding of the w-term scores, w u of |q||k| scale each, which moves a probability
    by up to twice that, relatively) and a rounding per term of the w-term and two T-term sums; doubled for
    margin. 0 where nothing contributes (a hidden key's terms are exactly 0)."""
    t, w = q.shape[1], q.shape[2]
    abs_scores = np.einsum("ntw,nsw->nts", np.abs(q), np.abs(k)) * scale  # (n, T, T)
    relative = softmax_rtol(abs_scores) + 2 * (w + 2) * U32 * (1 + abs_scores.max()) + 2 * (w + 2 * t + 2) * U32
    abs_dprobs = np.einsum("ntw,nsw->nts", np.abs(dout), np.abs(v))  # (n, T, T)
    abs_dscores = scale * probs * (abs_dprobs + np.sum(probs * abs_dprobs, axis=2, keepdims=True))  # (n, T, T)
    magnitudes = (abs_dscores @ np.abs(k), abs_dscores.transpose(0, 2, 1) @ np.abs(q),
                  probs.transpose(0, 2, 1) @ np.abs(dout))  # (n, T, w) each
    return tuple(2 * relative * m for m in magnitudes)


# (heads, T, width, gap): T of one and two; gaps of T - 1 and more (nothing is seen after the gap); odd widths
# and a width of 1; T = 65, where the cpu backend's causal attention splits the queries (gap attention must not)
@pytest.mark.parametrize("n,t,w,gap", [
    (1, 1, 1, 1), (2, 1, 3, 4), (2, 2, 3, 1), (3, 2, 1, 5), (3, 5, 3, 1), (1, 5, 4, 2), (2, 6, 5, 3),
    (2, 6, 5, 5), (1, 4, 7, 9), (3, 9, 1, 2), (2, 33, 16, 4), (1, 65, 7, 10),
])
def test_gap_attention_and_backward(backend, n, t, w, gap):
    rng = _rng(36)
    q, k, v, dout = (seen(backend, rng.normal(scale=1.5, size=(n, t, w))) for _ in range(4))  # (n, T, w) each
    scale = 1.0 / math.sqrt(w)
    out, saved = backend.gap_attention(put(backend, q), put(backend, k), put(backend, v), scale, gap)
    grads = backend.gap_attention_backward(put(backend, dout), saved, scale, gap)
    expected, probs = gap_attention_expected(q, k, v, dout, scale, gap)
    assert_within(get(backend, out), expected[0], attention_atol(q, k, v, scale))  # see attention_atol
    bounds = attention_grad_bounds(q, k, v, dout, scale, probs)  # see attention_grad_bounds
    for name, got, want, bound in zip(("dq", "dk", "dv"), grads, expected[1:], bounds):
        assert get(backend, got).shape == (n, t, w), name
        assert_within(get(backend, got), want, bound)


def test_gap_attention_hides_exactly_the_gap(backend):
    """New k and v at key p leave query i's output bit for bit as it was when p is in i's gap (i + 1 .. i + gap),
    and change it when p is seen: before the query, the query itself, or after the gap."""
    n, t, w, gap = 2, 8, 3, 2
    rng = _rng(37)
    q, k, v = (seen(backend, rng.normal(size=(n, t, w))) for _ in range(3))  # (n, T, w) each
    before = get(backend, backend.gap_attention(put(backend, q), put(backend, k), put(backend, v), 0.5, gap)[0])
    for p in range(t):
        other_k, other_v = k.copy(), v.copy()
        other_k[:, p], other_v[:, p] = seen(backend, rng.normal(size=(2, n, w)))
        after = get(backend, backend.gap_attention(put(backend, q), put(backend, other_k), put(backend, other_v),
                                                   0.5, gap)[0])
        for i in range(t):
            if i < p <= i + gap:
                np.testing.assert_array_equal(after[:, i], before[:, i], err_msg=f"query {i}, hidden key {p}")
            else:
                assert np.all(after[:, i] != before[:, i]), f"query {i} does not see key {p}"


@pytest.mark.parametrize("n,t,w", [(2, 6, 5), (1, 65, 7)])
def test_a_gap_to_the_end_is_causal_attention(backend, n, t, w):
    """With gap >= T - 1 nothing is seen after the gap: the output and gradients are causal attention's."""
    rng = _rng(38)
    q, k, v, dout = (seen(backend, rng.normal(size=(n, t, w))) for _ in range(4))  # (n, T, w) each
    args = [put(backend, a) for a in (q, k, v)]
    causal_out, causal_saved = backend.causal_attention(*args, 0.5)
    causal = (causal_out, *backend.causal_attention_backward(put(backend, dout), causal_saved, 0.5))
    for gap in (t - 1, t + 3):
        out, saved = backend.gap_attention(*args, 0.5, gap)
        gaps = (out, *backend.gap_attention_backward(put(backend, dout), saved, 0.5, gap))
        # both within their own error of the exact value (see attention_atol and attention_grad_bounds)
        probs = gap_attention_expected(q, k, v, dout, 0.5, gap)[1]
        bounds = [attention_atol(q, k, v, 0.5), *attention_grad_bounds(q, k, v, dout, 0.5, probs)]
        for got, want, bound in zip(gaps, causal, bounds):
            assert_within(get(backend, got), get(backend, want), 2 * bound)


@pytest.mark.parametrize("gap", [0, -1, 1.5, True, None])
def test_gap_attention_needs_a_gap_of_one_or_more(backend, gap):
    x = put(backend, _rng(39).normal(size=(2, 4, 3)))
    with pytest.raises(ValueError, match=r"gap_attention: gap must be a whole number >= 1 .*got"):
        backend.gap_attention(x, x, x, 0.5, gap)
    _, saved = backend.gap_attention(x, x, x, 0.5, 1)
    with pytest.raises(ValueError, match=r"gap_attention_backward: gap must be a whole number >= 1"):
        backend.gap_attention_backward(x, saved, 0.5, gap)


@pytest.mark.parametrize("q_shape,k_shape,v_shape,message", [
    ((2, 4, 3), (2, 5, 3), (2, 5, 3), r"q is \(2, 4, 3\) but k is \(2, 5, 3\)"),  # a cache: not for gap attention
    ((2, 4, 3), (2, 4, 3), (2, 4, 2), r"q is \(2, 4, 3\) but v is \(2, 4, 2\)"),
    ((2, 4, 3), (3, 4, 3), (2, 4, 3), r"q is \(2, 4, 3\) but k is \(3, 4, 3\)"),
    ((4, 3), (4, 3), (4, 3), r"q must be \(n, T, w\), got shape \(4, 3\)"),
])
def test_gap_attention_shapes_must_agree(backend, q_shape, k_shape, v_shape, message):
    q, k, v = (backend.zeros(shape) for shape in (q_shape, k_shape, v_shape))
    with pytest.raises(ValueError, match="gap_attention: " + message):
        backend.gap_attention(q, k, v, 0.5, 1)


def test_gap_attention_backward_checks_dout(backend):
    x = put(backend, _rng(40).normal(size=(2, 4, 3)))
    _, saved = backend.gap_attention(x, x, x, 0.5, 2)
    with pytest.raises(ValueError, match=r"gap_attention_backward: dout is \(2, 3, 3\) but q is \(2, 4, 3\)"):
        backend.gap_attention_backward(backend.zeros((2, 3, 3)), saved, 0.5, 2)


# ---- fused softmax + cross-entropy --------------------------------------------------------


@pytest.mark.parametrize("rows,cols", [(1, 1), (1, 33), (6, 65), (3, 127), (4, 5)])
def test_fused_softmax_ce_grad(backend, rows, cols):
    rng = _rng(27)
    logits = seen(backend, rng.normal(scale=3.0, size=(rows, cols)))
    targets = rng.integers(0, cols, size=rows)
    loss, dlogits = backend.fused_softmax_ce_grad(put(backend, logits), backend.ids(targets))
    assert isinstance(loss, float)
    losses = []
    expected = np.empty_like(logits)
    for i in range(rows):
        row = logits[i]
        m = max(row)
        lse = m + math.log(math.fsum(math.exp(v - m) for v in row))
        losses.append(lse - row[targets[i]])
        expected[i] = softmax_row(row)
        expected[i, targets[i]] -= 1.0
    expected /= rows
    # log of a float32 sum of `cols` terms: absolute error about cols * u * (1 + |lse|)
    assert loss == pytest.approx(math.fsum(losses) / rows, rel=4 * (cols + 4) * U32, abs=4 * (cols + 4) * U32 * 10)
    # softmax entries (see softmax_rtol) minus 1 at the target, which leaves an absolute error ~ rtol / rows
    rtol = softmax_rtol(logits)
    np.testing.assert_allclose(get(backend, dlogits), expected, rtol=rtol, atol=rtol / rows)


def test_fused_softmax_ce_grad_large_logits(backend):
    logits = np.array([
        [1e4, -1e4, 0.0],  # target 1: loss 2e4
        [1e4, -1e4, 0.0],  # target 0: loss ~ 0
        [-1e4, -1e4, -1e4],  # target 2: uniform, loss log 3
    ])
    targets = np.array([1, 0, 2])
    loss, dlogits = backend.fused_softmax_ce_grad(put(backend, logits), backend.ids(targets))
    assert math.isfinite(loss)
    # mean of 2e4, ~0 and log 3; float32 represents 2e4 exactly, log 3 to u
    assert loss == pytest.approx((2e4 + 0.0 + math.log(3.0)) / 3, rel=8 * U32)
    expected = np.array([
        [1.0, -1.0, 0.0],
        [0.0, 0.0, 0.0],  # softmax is one-hot at the target
        [1 / 3, 1 / 3, 1 / 3 - 1.0],
    ]) / 3
    got = get(backend, dlogits)
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, expected, rtol=0, atol=8 * U32)  # a few roundings of values <= 1/3


# ---- embeddings -----------------------------------------------------------------------------


@pytest.mark.parametrize("d_model", [1, 33, 65])
def test_embedding_gather(backend, d_model):
    table = seen(backend, _rng(28).normal(size=(7, d_model)))
    ids = np.array([3, 0, 3, 6, 6, 6, 1, 3])  # repeated ids
    table_dev = put(backend, table)
    out = backend.embedding_gather(table_dev, backend.ids(ids), len(ids), d_model)
    expected = np.array([[table[ids[p], j] for j in range(d_model)] for p in range(len(ids))])
    np.testing.assert_array_equal(get(backend, out), expected)  # copies: exact
    backend.scale_(out, 0.0)  # a new array: changing it leaves the table alone
    np.testing.assert_array_equal(get(backend, table_dev), table)


@pytest.mark.parametrize("d_model", [1, 33, 65])
def test_embedding_scatter_add_accumulates_repeated_ids(backend, d_model):
    rng = _rng(29)
    ids = np.array([3, 0, 3, 6, 6, 6, 1, 3, 3])  # id 3 four times, 6 three times; 2, 4, 5 never
    grad = seen(backend, rng.normal(size=(len(ids), d_model)))
    start = seen(backend, rng.normal(size=(7, d_model)))
    d_table = put(backend, start)
    view = d_table[:]
    assert backend.embedding_scatter_add(put(backend, grad), backend.ids(ids), d_table, len(ids), d_model) is None
    expected = start.copy()
    for p, token in enumerate(ids):
        expected[token] += grad[p]
    got = get(backend, view)
    # up to 5 float32 adds per entry (any order, atomics on CUDA)
    bound = 2 * 6 * U32 * (np.abs(start) + np.abs(expected) + 4 * np.abs(grad).max())
    assert_within(got, expected, bound)
    np.testing.assert_array_equal(got[[2, 4, 5]], start[[2, 4, 5]])  # untouched rows stay exact


# ---- the rest of the contract ---------------------------------------------------------------


def test_release_sync_and_finalize_are_safe(backend):
    a = backend.zeros((4, 4))
    backend.release(a)
    backend.sync()
    backend.finalize()
    backend.finalize()  # idempotent
