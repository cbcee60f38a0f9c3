"""The CUDA backend on a real GPU, held against the NumPy reference.

Op parity on awkward inputs (one row, widths 1/33/65/127, repeated ids, logits of
±1e4, T = 2048 attention rows), then end to end: the same weights and batches give
the same gradients and 20 Adam steps of losses; one training step makes exactly one
upload and one download; seq_len 2048 and 4096 train; a CUDA-trained checkpoint
loads on the CPU with the same logits. Flash attention (the default) against float64
for T = 1, 33, 257 and widths 1-128, and against the materialised path at T = 4096;
two trainings give bit-identical losses, and so does training on a non-blocking stream. tests/backends/test_ops.py covers the plain op
contract on every backend; this file is about what is particular to CUDA.

Every test is marked `gpu` and skipped, with the reason, without a usable GPU.
Tolerances are against float64 unless said otherwise; each says why it is what it is.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from attention_reference import attention_reference
from backend_kinds import CUDA_SKIP
from float32_inputs import f32
from microgpt.backends.cuda import CuBLASBackend
from microgpt.backends.numpy_backend import NumpyBackend
from microgpt.data.tokenizer import CharTokenizer
from microgpt.model.gpt import GPT, GPTConfig
from microgpt.model.rope import rope_tables
from tiny_gpt import windows_for

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(CUDA_SKIP is not None, reason=str(CUDA_SKIP)),
]

WIDTHS = (1, 33, 65, 127)
# float32 results of O(1) values against float64: a few float32 ulps (6e-8 each) after sums of ~100 terms.
F32_ATOL = 2e-6


@pytest.fixture
def cuda():
    be = CuBLASBackend()
    yield be
    be.finalize()


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def run(cuda, op: str, *host_args, **kwargs):
    """cuda.op on device copies of host_args; array results come back as host arrays."""
    args = [cuda.from_host(a) if isinstance(a, np.ndarray) and a.dtype.kind == "f" else a for a in host_args]
    result = getattr(cuda, op)(*args, **kwargs)
    if isinstance(result, tuple):
        return tuple(cuda.to_host(r) if hasattr(r, "shape") else r for r in result), args
    return (cuda.to_host(result) if hasattr(result, "shape") else result), args


# ---- ops on awkward inputs -----------------------------------------------------------------


@pytest.mark.parametrize("rows", [1, 7])
@pytest.mark.parametrize("cols", WIDTHS)
def test_softmax_and_backward(cuda, reference, rng, rows, cols):
    x, ds = f32(rng.normal(0, 3, (rows, cols))), f32(rng.normal(size=(rows, cols)))
    s, _ = run(cuda, "softmax_rows", x)
    np.testing.assert_allclose(s, reference.softmax_rows(x), atol=F32_ATOL)
    got, _ = run(cuda, "softmax_backward", f32(s), ds)
    np.testing.assert_allclose(got, reference.softmax_backward(f32(s), ds), atol=F32_ATOL)


def test_softmax_of_huge_logits_does_not_overflow(cuda, reference):
    x = np.array([[1e4, -1e4, 0.0, 1e4 - 1], [-1e4, -1e4, -1e4, -1e4]])  # (2, 4)
    s, _ = run(cuda, "softmax_rows", x)
    assert np.isfinite(s).all()
    np.testing.assert_allclose(s, reference.softmax_rows(x), atol=F32_ATOL)


@pytest.mark.parametrize("seq_len", [1, 33, 2048])
def test_fused_attention_softmax_and_backward(cuda, reference, rng, seq_len):
    blocks = 2  # two stacked (T, T) blocks: row i is position i % T
    scores = f32(rng.normal(0, 4, (blocks * seq_len, seq_len)))
    scale = 1 / math.sqrt(16)
    probs, _ = run(cuda, "fused_attn_softmax", scores, scale)
    want = reference.fused_attn_softmax(scores, scale)
    np.testing.assert_allclose(probs, want, atol=F32_ATOL)
    future = np.triu(np.ones((seq_len, seq_len), bool), 1)[np.arange(blocks * seq_len) % seq_len]  # (rows, T)
    assert not probs[future].any()  # masked entries are exactly 0
    ds = f32(rng.normal(size=scores.shape))
    got, _ = run(cuda, "fused_attn_softmax_backward", f32(probs), ds, scale)
    # each entry sums T products for its row dot product: allow float32 rounding of a 2048-term sum
    np.testing.assert_allclose(got, reference.fused_attn_softmax_backward(f32(probs), ds, scale), atol=1e-5)


def test_causal_masks_are_exact(cuda, reference, rng):
    scores = f32(rng.normal(size=(99, 33)))
    dev = cuda.from_host(scores)
    cuda.causal_mask_batched(dev, 33)
    want = scores.copy()
    reference.causal_mask_batched(want, 33)
    np.testing.assert_array_equal(cuda.to_host(dev), want)  # assignments only: exact
    square = cuda.from_host(scores[:33])
    cuda.causal_mask(square)
    want = scores[:33].copy()
    reference.causal_mask(want)
    np.testing.assert_array_equal(cuda.to_host(square), want)


@pytest.mark.parametrize("rows", [1, 33, 1000])  # 1000 rows: the column sums take two passes
@pytest.mark.parametrize("cols", (1, 33, 65, 384))
def test_layer_norm(cuda, reference, rng, rows, cols):
    x = f32(rng.normal(2, 3, (rows, cols)))
    gamma, beta = f32(rng.normal(1, 0.1, (1, cols))), f32(rng.normal(0, 0.1, (1, cols)))
    (out, norm, std_inv), _ = run(cuda, "layer_norm_forward", x, gamma, beta)
    want_out, want_norm, want_std_inv = reference.layer_norm_forward(x, gamma, beta)
    # normalised values are O(1); float32 mean/variance of up to 384 terms: a few ulps
    np.testing.assert_allclose(norm, want_norm, atol=1e-5)
    np.testing.assert_allclose(out, want_out, atol=1e-5)
    np.testing.assert_allclose(std_inv, want_std_inv, rtol=1e-5)
    grad = f32(rng.normal(size=(rows, cols)))
    (dx, dgamma, dbeta), _ = run(cuda, "layer_norm_backward", grad, f32(norm), f32(std_inv), gamma)
    want_dx, want_dgamma, want_dbeta = reference.layer_norm_backward(grad, f32(norm), f32(std_inv), gamma)
    # dx is std_inv times O(1) terms that cancel: a rounding of one of them (nvcc fuses a product and a
    # subtraction into an fma) grows by std_inv, 1/sqrt(eps) ~ 316 where a row is constant (cols = 1)
    np.testing.assert_allclose(dx, want_dx, atol=1e-5 + 1e-6 * float(want_std_inv.max()))
    # dgamma/dbeta sum `rows` O(1) terms: the worst-case float32 rounding grows with the count
    np.testing.assert_allclose(dgamma, want_dgamma, atol=1e-6 * rows + 1e-6)
    np.testing.assert_allclose(dbeta, want_dbeta, atol=1e-6 * rows + 1e-6)


def test_sum_rows_past_the_grid_y_limit(cuda):
    rows = 65535 * 128 + 1000  # more 128-row chunks than CUDA's 65535 grid.y: each chunk must take more rows
    got = cuda.to_host(cuda.sum_rows(cuda._cp.ones((rows, 2), dtype=np.float32)))
    np.testing.assert_array_equal(got, [[rows, rows]])  # sums of ones below 2**24: exact in float32


@pytest.mark.parametrize("rows", [1, 127, 20000])  # 20000: partial sums, then a second pass
@pytest.mark.parametrize("cols", WIDTHS)
def test_sum_rows(cuda, reference, rng, rows, cols):
    x = f32(rng.normal(size=(rows, cols)))
    got, _ = run(cuda, "sum_rows", x)
    assert got.shape == (1, cols)
    # a float32 sum of `rows` O(1) terms: the worst-case rounding grows with the count
    np.testing.assert_allclose(got, reference.sum_rows(x), atol=1e-6 * rows + 1e-6)


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (1, 33, 65), (127, 1, 33), (65, 127, 33)])
@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize("transpose_b", [False, True])
def test_matmul_family_through_cublas(cuda, reference, rng, m, k, n, transpose_a, transpose_b):
    a = f32(rng.normal(size=(k, m) if transpose_a else (m, k)))
    b = f32(rng.normal(size=(n, k) if transpose_b else (k, n)))
    want = reference.matmul(a, b, transpose_a, transpose_b)
    # a k-term float32 dot product of O(1) values errs by about sqrt(k) * 6e-8 * |terms|: 1e-4 is ample
    got, _ = run(cuda, "matmul", a, b, transpose_a, transpose_b)
    np.testing.assert_allclose(got, want, atol=1e-4)
    start = f32(rng.normal(size=(m, n)))
    dst = cuda.from_host(start)
    cuda.matmul_into(cuda.from_host(a), cuda.from_host(b), dst, transpose_a, transpose_b, accumulate=True)
    np.testing.assert_allclose(cuda.to_host(dst), start + want, atol=1e-4)
    batch_a, batch_b = np.stack([a, 2 * a, -a]), np.stack([b, b, 3 * b])  # (3, ., .)
    got, _ = run(cuda, "bmm", batch_a, batch_b, transpose_a, transpose_b)
    np.testing.assert_allclose(got, reference.bmm(batch_a, batch_b, transpose_a, transpose_b), atol=1e-3)


def test_matmul_into_a_parameter_view_touches_only_the_view(cuda, rng):
    storage = cuda.zeros((4, 200))  # like Parameters: rows data/grad/m/v
    view = storage[1, 10:22].reshape(3, 4)
    a, b = rng.normal(size=(5, 3)).astype(np.float32), rng.normal(size=(5, 4)).astype(np.float32)
    cuda.matmul_into(cuda.from_host(a), cuda.from_host(b), view, transpose_a=True, accumulate=True)
    cuda.matmul_into(cuda.from_host(a), cuda.from_host(b), view, transpose_a=True, accumulate=True)
    host = cuda.to_host(storage)
    np.testing.assert_allclose(host[1, 10:22].reshape(3, 4), 2 * a.T @ b, atol=1e-5)
    host[1, 10:22] = 0
    assert not host.any()


def test_batched_matmul_list_and_transpose(cuda, reference, rng):
    a_list = [f32(rng.normal(size=(33, 7))) for _ in range(3)]
    b_list = [f32(rng.normal(size=(65, 7))) for _ in range(3)]
    a_dev, b_dev = [cuda.from_host(a) for a in a_list], [cuda.from_host(b) for b in b_list]
    got = cuda.batched_matmul(a_dev, b_dev, False, True)
    for g, a, b in zip(got, a_list, b_list):
        np.testing.assert_allclose(cuda.to_host(g), a @ b.T, atol=1e-4)
    for shape in [(1, 1), (1, 127), (65, 33)]:
        x = rng.normal(size=shape).astype(np.float32)
        np.testing.assert_array_equal(cuda.to_host(cuda.transpose(cuda.from_host(x))), x.T)  # a copy: exact


@pytest.mark.parametrize("cols", WIDTHS)
def test_bias_and_relu_are_exact(cuda, rng, cols):
    cpu = NumpyBackend(np.float32)
    x, bias, grad = (rng.normal(size=s).astype(np.float32) for s in [(5, cols), (1, cols), (5, cols)])
    dev = cuda.from_host(x)
    cuda.bias_add(dev, cuda.from_host(bias))
    np.testing.assert_array_equal(cuda.to_host(dev), x + bias)  # one float32 add per element: bit-identical
    (out, mask), _ = run(cuda, "relu_forward", x)
    want_out, want_mask = cpu.relu_forward(x)
    np.testing.assert_array_equal(out, want_out)
    np.testing.assert_array_equal(mask, want_mask)
    got, _ = run(cuda, "relu_backward", grad, mask)
    np.testing.assert_array_equal(got, cpu.relu_backward(grad, mask))
    dev = cuda.from_host(x)
    out, mask = cuda.fused_bias_relu(dev, cuda.from_host(bias))
    want_x = x.copy()
    want_out, want_mask = cpu.fused_bias_relu(want_x, bias)
    np.testing.assert_array_equal(cuda.to_host(dev), want_x)  # x is updated in place, as the reference does
    np.testing.assert_array_equal(cuda.to_host(out), want_out)
    np.testing.assert_array_equal(cuda.to_host(mask), want_mask)


def test_adam_step_matches_numpy_float32(cuda, rng):
    cpu = NumpyBackend(np.float32)
    n = 1000 + 33
    host = [rng.normal(size=(1, n)).astype(np.float32) for _ in range(2)]  # param, grad
    host += [np.zeros((1, n), np.float32), np.zeros((1, n), np.float32)]  # m, v
    param, grad, m, v = (cuda.from_host(a) for a in host)
    want = [a.copy() for a in host]
    for t in (1, 2, 3):
        cuda.adam_step(param, grad, m, v, 1e-2, t)
        cpu.adam_step(*want, 1e-2, t)
    # the same float32 formula; only the compiler's fused multiply-adds round differently (ulps of the step)
    np.testing.assert_allclose(cuda.to_host(param), want[0], atol=1e-6)
    np.testing.assert_allclose(cuda.to_host(m), want[2], atol=1e-6)
    np.testing.assert_allclose(cuda.to_host(v), want[3], rtol=1e-5)


@pytest.mark.parametrize("dim", [1, 33, 64])
def test_rope_and_inverse(cuda, reference, rng, dim):
    seq_len, blocks = 33, 3
    cos, sin = (f32(t) for t in rope_tables(dim, 50))
    x = f32(rng.normal(size=(blocks * seq_len, dim)))
    dev = cuda.from_host(x)
    cos_dev, sin_dev = cuda.from_host(cos), cuda.from_host(sin)
    cuda.rope_apply(dev, cos_dev[:seq_len], sin_dev[:seq_len])  # row r takes cache row r % 33
    want = x.copy()
    reference.rope_apply(want, cos[:seq_len], sin[:seq_len])
    np.testing.assert_allclose(cuda.to_host(dev), want, atol=1e-5)  # two float32 products and a sum per value
    if dim % 2:
        np.testing.assert_array_equal(cuda.to_host(dev)[:, -1], x[:, -1])  # the odd last column is untouched
    cuda.rope_apply_inverse(dev, cos_dev[:seq_len], sin_dev[:seq_len])
    np.testing.assert_allclose(cuda.to_host(dev), x, atol=1e-5)
    one = cuda.from_host(x[:1])  # one new token at position 7
    cuda.rope_apply(one, cos_dev[7:8], sin_dev[7:8])
    want = x[:1].copy()
    reference.rope_apply(want, cos[7:8], sin[7:8])
    np.testing.assert_allclose(cuda.to_host(one), want, atol=1e-5)


@pytest.mark.parametrize("rows,cols", [(1, 65), (64, 65), (33, 1), (5000, 33)])  # 5000: thousands of blocks finish
def test_softmax_cross_entropy(cuda, reference, rng, rows, cols):
    logits = f32(rng.normal(0, 2, (rows, cols)))
    targets = rng.integers(0, cols, rows)
    (loss, dlogits), _ = run(cuda, "fused_softmax_ce_grad", logits, cuda.ids(targets))
    want_loss, want_dlogits = reference.fused_softmax_ce_grad(logits, targets)
    assert isinstance(loss, float)
    assert loss == pytest.approx(want_loss, rel=1e-5, abs=1e-6)  # float32 logs and a mean over rows
    np.testing.assert_allclose(dlogits, want_dlogits, atol=F32_ATOL / rows)  # softmax values divided by rows


def test_cross_entropy_of_huge_logits_is_finite(cuda, reference):
    logits = np.array([[1e4, -1e4, 0.0], [-1e4, 1e4, 1e4], [0.0, 0.0, -1e4]])  # (3, 3)
    targets = np.array([0, 2, 2])
    (loss, dlogits), _ = run(cuda, "fused_softmax_ce_grad", logits, targets)
    want_loss, want_dlogits = reference.fused_softmax_ce_grad(logits, targets)
    assert np.isfinite(loss) and np.isfinite(dlogits).all()
    # loss terms reach 1e4: float32 keeps about 7 digits of them
    assert loss == pytest.approx(want_loss, rel=1e-6)
    np.testing.assert_allclose(dlogits, want_dlogits, atol=F32_ATOL)


def test_embedding_gather_and_scatter_add_with_repeated_ids(cuda, rng):
    table = rng.normal(size=(10, 33)).astype(np.float32)
    ids = np.array([3, 3, 0, 9, 3, 3, 7])
    dev_ids = cuda.ids(ids)
    got = cuda.to_host(cuda.embedding_gather(cuda.from_host(table), dev_ids, len(ids), 33))
    np.testing.assert_array_equal(got, table[ids])  # a copy: exact
    grad = rng.normal(size=(len(ids), 33)).astype(np.float32)
    d_table = cuda.zeros((10, 33))
    cuda.embedding_scatter_add(cuda.from_host(grad), dev_ids, d_table, len(ids), 33)
    want = np.zeros((10, 33))
    np.add.at(want, ids, grad.astype(np.float64))
    # row 3 adds four values with atomics in any order: float32 rounding of a 4-term sum
    np.testing.assert_allclose(cuda.to_host(d_table), want, atol=1e-6)


@pytest.mark.slow
def test_row_kernels_past_two_to_the_31_elements(cuda, reference, rng):
    """Stacked (4096, 4096) blocks of more than 2**31 scores in all: 32-bit offsets would wrap in the last rows."""
    cp, t = cuda._cp, 4096
    rows = 2**31 // t + 64  # rows 524288.. start past element 2**31; they are positions 0..63 of a block
    scores = cp.zeros((rows, t), dtype=np.float32)
    tail = f32(rng.normal(0, 3, (64, t)))
    scores[-64:] = cp.asarray(tail, dtype=np.float32)
    probs = cuda.fused_attn_softmax(scores, 0.5)
    want = tail * 0.5
    reference.causal_mask_batched(want, t)  # the tail's rows are positions 0..63
    np.testing.assert_allclose(cuda.to_host(probs[-64:]), reference.softmax_rows(want), atol=F32_ATOL)
    ds = f32(rng.normal(size=(64, t)))
    dprobs = cp.zeros_like(scores)
    dprobs[-64:] = cp.asarray(ds, dtype=np.float32)
    grad = cuda.fused_attn_softmax_backward(probs, dprobs, 0.5)
    want = reference.fused_attn_softmax_backward(f32(cuda.to_host(probs[-64:])), ds, 0.5)
    np.testing.assert_allclose(cuda.to_host(grad[-64:]), want, atol=1e-5)
    for array in (probs, dprobs, grad):
        cuda.release(array)
    targets = rng.integers(0, t, rows)
    loss, dlogits = cuda.fused_softmax_ce_grad(scores, cuda.ids(targets))
    want_tail = reference.fused_softmax_ce_grad(tail, targets[-64:])[1] * 64 / rows  # the mean is over all rows
    np.testing.assert_allclose(cuda.to_host(dlogits[-64:]), want_tail, atol=F32_ATOL / rows)
    # every other row is all zeros: loss log(4096) each
    want_loss = ((rows - 64) * math.log(t) + 64 * reference.fused_softmax_ce_grad(tail, targets[-64:])[0]) / rows
    assert loss == pytest.approx(want_loss, rel=1e-4)  # a float32 sum of half a million row losses
    cuda.release(dlogits)
    cuda.causal_mask_batched(scores, t)
    masked = cuda.to_host(scores[-64:])
    want = tail.copy()
    reference.causal_mask_batched(want, t)
    np.testing.assert_array_equal(masked, want)


def test_head_split_and_merge_write_through_cupy_views(cuda, rng):
    """merge_heads writes through `dst[:, cols].reshape(...)`: on CuPy that reshape must be a view, not a copy."""
    from microgpt.model.attention import head_groups, merge_heads, split_heads

    x = rng.normal(size=(6, 40)).astype(np.float32)  # two sequences of 3 rows; heads 8, 8, 24
    dev = cuda.from_host(x)
    out = cuda.zeros((6, 40))
    for group in head_groups((8, 8, 24)):
        heads = split_heads(dev, group)
        assert heads.flags.c_contiguous and heads.shape == (group.count * 6, group.width)
        merge_heads(out, heads, group)
    np.testing.assert_array_equal(cuda.to_host(out), x)
    one = cuda.zeros((1, 40))  # one row (a decoding step): the column slice is C-contiguous only per row
    for group in head_groups((8, 8, 24)):
        merge_heads(one, split_heads(dev[2:3], group), group)
    np.testing.assert_array_equal(cuda.to_host(one), x[2:3])


# ---- plumbing ------------------------------------------------------------------------------


def test_raw_memory_round_trip_is_counted(cuda):
    host = np.arange(12, dtype=np.float32)
    back = np.zeros_like(host)
    ptr = cuda.gpu_alloc(host.nbytes)
    before = dict(cuda.transfers)
    cuda.gpu_upload(ptr, host, host.nbytes)
    cuda.gpu_download(back, ptr, host.nbytes)
    cuda.sync()
    cuda.gpu_free(ptr)
    np.testing.assert_array_equal(back, host)
    assert cuda.transfers == {"to_device": before["to_device"] + 1, "to_host": before["to_host"] + 1}
    with pytest.raises(ValueError, match="gpu_free"):
        cuda.gpu_free(ptr)


def test_errors_name_the_problem(cuda):
    with pytest.raises(ValueError, match="do not chain"):
        cuda.matmul(cuda.zeros((2, 3)), cuda.zeros((4, 5)))
    with pytest.raises(ValueError, match="batch sizes differ"):
        cuda.bmm(cuda.zeros((2, 3, 4)), cuda.zeros((3, 4, 5)))
    with pytest.raises(TypeError, match="from_host"):
        cuda.softmax_rows(np.zeros((2, 2), np.float32))
    with pytest.raises(ValueError, match="view"):
        cuda.release(cuda.zeros((4, 4))[1:])


def test_release_finalize_and_kernel_cache(cuda):
    from microgpt.backends.cuda import loader

    cuda.release(cuda.softmax_rows(cuda.zeros((2, 3))))
    module = loader.MODULES[("softmax.cu", cuda.device_id)]
    other = CuBLASBackend()
    other.softmax_rows(other.zeros((2, 3)))
    assert loader.MODULES[("softmax.cu", other.device_id)] is module  # compiled once per process
    other.finalize()
    other.finalize()  # idempotent
    with pytest.raises(RuntimeError, match="finalized"):
        _ = other.handle


# ---- flash attention -----------------------------------------------------------------------


# T = 1, T not a multiple of the 32-key tile or the 8-row block, and widths 1 to 128
@pytest.mark.parametrize("t", [1, 33, 257])
@pytest.mark.parametrize("w", [1, 3, 16, 64, 128])
def test_flash_attention_matches_float64(cuda, rng, t, w):
    n = 3
    q, k, v, dout = (f32(rng.normal(0, 1.5, (n, t, w))) for _ in range(4))
    scale = 1 / math.sqrt(w)
    out, saved = cuda.causal_attention(*(cuda.from_host(a) for a in (q, k, v)), scale)
    assert saved[0] == "flash"
    grads = cuda.causal_attention_backward(cuda.from_host(dout), saved, scale)
    # float32 dot products of w terms and sums over up to 257 keys, of O(1) values (O(10) for dq and dk,
    # which carry |q||k| w scale): float32 rounding of ~1e-6 relative to those sizes, plus the GPU's expf
    for name, got, want in zip(("out", "dq", "dk", "dv"), (out, *grads), attention_reference(q, k, v, dout, scale)):
        np.testing.assert_allclose(cuda.to_host(got), want, atol=5e-5 * max(1, np.abs(want).max()), err_msg=name)


@pytest.mark.slow
def test_flash_attention_at_t_4096_agrees_with_the_materialised_path(cuda, rng):
    materialised = CuBLASBackend(attention="materialised")
    try:
        q, k, v, dout = (rng.normal(size=(4, 4096, 64)).astype(np.float32) for _ in range(4))
        results = []
        for be in (cuda, materialised):
            out, saved = be.causal_attention(*(be.from_host(a) for a in (q, k, v)), 0.125)
            grads = be.causal_attention_backward(be.from_host(dout), saved, 0.125)
            results.append([be.to_host(a) for a in (out, *grads)])
        for name, flash, plain in zip(("out", "dq", "dk", "dv"), *results):
            # two float32 computations of sums over up to 4096 keys, in different orders
            np.testing.assert_allclose(flash, plain, atol=1e-4 * max(1, np.abs(plain).max()), err_msg=name)
    finally:
        materialised.finalize()


# ---- end to end ----------------------------------------------------------------------------

E2E_CONFIG = GPTConfig(vocab_size=65, d_model=40, n_layers=2, head_dims=(8, 8, 24), d_ff=72, seq_len=33)


def test_gradients_at_step_zero_match_float64(cuda):
    gpu_model = GPT(E2E_CONFIG, cuda, seed=7)
    cpu_model = GPT(E2E_CONFIG, NumpyBackend(np.float64), seed=7)
    windows = windows_for(E2E_CONFIG, 3, 0)
    (gpu_loss, _), (cpu_loss, _) = gpu_model.loss_and_backward(windows), cpu_model.loss_and_backward(windows)
    assert gpu_loss == pytest.approx(cpu_loss, rel=1e-5)
    gpu_grads = gpu_model.params.to_host(gpu_model.params.grad)
    cpu_grads = cpu_model.params.to_host(cpu_model.params.grad)
    for name, want in cpu_grads.items():
        # float32 through two blocks against float64: relative rounding of ~1e-6 per op, amplified by
        # LayerNorm's cancellations; 2e-4 of the tensor's largest entry still catches any real bug,
        # which moves a gradient by a large fraction of its size
        scale = np.abs(want).max()
        np.testing.assert_allclose(gpu_grads[name], want, atol=2e-4 * scale + 1e-7, err_msg=name)


def test_twenty_adam_steps_track_float64(cuda):
    gpu_model = GPT(E2E_CONFIG, cuda, seed=3)
    cpu_model = GPT(E2E_CONFIG, NumpyBackend(np.float64), seed=3)
    for step in range(20):
        windows = windows_for(E2E_CONFIG, 4, 100 + step)
        gpu_loss, cpu_loss = gpu_model.train_step(windows, 1e-3), cpu_model.train_step(windows, 1e-3)
        # rounding differences feed back through the weights step after step; 20 steps of lr 1e-3
        # move the losses apart by far less than 1e-3, while a wrong update would show at once
        assert gpu_loss == pytest.approx(cpu_loss, abs=1e-3), f"step {step}"


def test_one_train_step_is_one_upload_and_one_download(cuda):
    model = GPT(E2E_CONFIG, cuda, seed=0)
    model.train_step(windows_for(E2E_CONFIG, 2, 0), 1e-3)  # the first step also uploads the RoPE tables
    cuda.transfers.update(to_device=0, to_host=0)
    loss = model.train_step(windows_for(E2E_CONFIG, 2, 1), 1e-3)
    assert math.isfinite(loss)
    assert cuda.transfers == {"to_device": 1, "to_host": 1}  # the token windows in, the loss out


@pytest.mark.slow
@pytest.mark.parametrize("seq_len", [2048, 4096])
def test_long_context_trains(cuda, seq_len):
    config = GPTConfig(
        vocab_size=65, d_model=64, n_layers=2, head_dims=(16,) * 4, d_ff=128, seq_len=seq_len
    )
    model = GPT(config, cuda, seed=0)
    losses = [model.train_step(windows_for(config, 1, step), 1e-3) for step in range(3)]
    assert all(math.isfinite(loss) for loss in losses), losses


def test_checkpoint_trained_on_cuda_loads_on_cpu(cuda, tmp_path):
    from microgpt.model.checkpoint import load_checkpoint, save_checkpoint

    vocab = "".join(chr(32 + i) for i in range(E2E_CONFIG.vocab_size))
    model = GPT(E2E_CONFIG, cuda, seed=5)
    for step in range(3):
        model.train_step(windows_for(E2E_CONFIG, 2, step), 1e-3)
    save_checkpoint(tmp_path / "ckpt", model, CharTokenizer(vocab), family_name="gpt")
    cpu_model, cpu_tokenizer, _ = load_checkpoint(tmp_path / "ckpt", NumpyBackend())
    assert cpu_tokenizer.vocab == vocab
    ids = windows_for(E2E_CONFIG, 2, 99)[:, :-1]
    gpu_logits = cuda.to_host(model.logits(ids))
    cpu_logits = cpu_model.logits(ids)
    # the same float32 weights on both; only summation orders differ (cuBLAS vs BLAS): logits are O(1-10)
    np.testing.assert_allclose(gpu_logits, cpu_logits, atol=1e-4)


def test_two_trainings_give_bit_identical_losses(cuda):
    """No kernel depends on the order its threads run in (no float atomics), and cuBLAS's GEMMs are
    deterministic on one GPU: the same seed and batches give the same losses, bit for bit."""
    runs = []
    for _ in range(2):
        model = GPT(E2E_CONFIG, cuda, seed=11)
        runs.append([model.train_step(windows_for(E2E_CONFIG, 4, 300 + step), 1e-3) for step in range(20)])
    assert runs[0] == runs[1]


def test_training_on_a_non_blocking_stream_gives_the_same_losses(cuda):
    """cuBLAS, our kernels and the copies all follow CuPy's current stream: on a non-blocking stream, which
    does not wait for the legacy default stream, every result is still ready before it is read."""
    import cupy

    def losses():
        model = GPT(E2E_CONFIG, cuda, seed=12)
        return [model.train_step(windows_for(E2E_CONFIG, 4, 400 + step), 1e-3) for step in range(10)]

    default = losses()
    with cupy.cuda.Stream(non_blocking=True):
        streamed = losses()
    assert streamed == default
