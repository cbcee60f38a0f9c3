"""The CUDA backend's kernels executed on the CPU emulator (tests/cuda_emulator), held against NumPy.

Each op goes through `CuBLASBackend`'s own Python (grid, block and argument computation
unchanged; only CuPy's launch is replaced) and its kernel runs as compiled by g++ from the
exact text NVRTC gets. Results are compared with the NumPy backend in float64 on the same
float32 inputs, on awkward shapes: one row, widths not multiples of 32 or of the block (1, 33,
65, 300 > 256 threads), more rows or elements than blocks, logits of +-1e4. Outputs start as
NaN, so an element a kernel forgets to write fails the comparison.

The emulator runs float32 C++ on the CPU: libm's expf, not the GPU's, and the same summation
order as the kernel. Tolerances say why they are what they are.
"""

from __future__ import annotations

import numpy as np
import pytest

from attention_reference import attention_reference
from float32_inputs import f32
from microgpt.backends import get_backend
from microgpt.backends.adamw import adamw_update
from microgpt.backends.cuda import kernel_launch as launch
from microgpt.backends.numpy_backend import NumpyBackend
from microgpt.model.gpt import GPT, GPTConfig

ROWS = [1, 7]
COLS = [1, 33, 65, 300]  # not multiples of 32; 300 is wider than the largest block (256 threads)
# float32 results of O(1) values against float64: a few float32 ulps (6e-8 each) after sums of ~300 terms
F32_ATOL = 2e-6


@pytest.fixture
def be(emulated):
    return emulated[0]


def normal(shape, scale=1.0, seed=0) -> np.ndarray:
    return f32(np.random.default_rng(seed).normal(0, scale, shape))


@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("cols", COLS)
def test_softmax_and_backward(be, reference, rows, cols):
    x, ds = normal((rows, cols), 3), normal((rows, cols), seed=1)
    s = be.to_host(be.softmax_rows(be.from_host(x)))
    np.testing.assert_allclose(s, reference.softmax_rows(x), atol=F32_ATOL)
    got = be.to_host(be.softmax_backward(be.from_host(f32(s)), be.from_host(ds)))
    np.testing.assert_allclose(got, reference.softmax_backward(f32(s), ds), atol=F32_ATOL)


def test_softmax_of_huge_logits(be, reference):
    x = f32(np.array([[1e4, -1e4, 0.0, 1e4 - 1]]))
    np.testing.assert_allclose(
        be.to_host(be.softmax_rows(be.from_host(x))), reference.softmax_rows(x), atol=F32_ATOL
    )


@pytest.mark.parametrize("seq_len", [1, 33])
def test_fused_attention_softmax_and_backward(be, reference, seq_len):
    scores = normal((2 * seq_len, seq_len), 2)  # two stacked (T, T) blocks
    s = be.to_host(be.fused_attn_softmax(be.from_host(scores), 0.3))
    np.testing.assert_allclose(s, reference.fused_attn_softmax(scores, 0.3), atol=F32_ATOL)
    ds = normal(scores.shape, seed=2)
    got = be.to_host(be.fused_attn_softmax_backward(be.from_host(f32(s)), be.from_host(ds), 0.3))
    np.testing.assert_allclose(got, reference.fused_attn_softmax_backward(f32(s), ds, 0.3), atol=F32_ATOL)


def test_causal_masks_are_exact(be, reference):
    single, stacked = normal((5, 5)), normal((15, 5))
    for op, x, extra in (("causal_mask", single, ()), ("causal_mask_batched", stacked, (5,))):
        device, want = be.from_host(x), x.copy()
        getattr(be, op)(device, *extra)
        getattr(reference, op)(want, *extra)
        np.testing.assert_array_equal(be.to_host(device), want.astype(np.float32))


@pytest.mark.parametrize("cols", COLS)
def test_bias_and_relu_are_exact(be, reference, cols, monkeypatch):
    """Element-wise: float32 in, one float32 operation each, so exactly NumPy's float32 results.
    Two blocks of 256 threads cover the elements: the grid-stride loops go round more than once."""
    monkeypatch.setattr(launch, "MAX_ELEMENT_BLOCKS", 2)
    x, bias, grad = normal((7, cols)), normal((1, cols), seed=1), normal((7, cols), seed=2)
    single = NumpyBackend(np.float32)
    x32, bias32, grad32 = (a.astype(np.float32) for a in (x, bias, grad))
    device = be.from_host(x)
    be.bias_add(device, be.from_host(bias))
    want = x32.copy()
    single.bias_add(want, bias32)
    np.testing.assert_array_equal(be.to_host(device), want)
    out, mask = be.relu_forward(be.from_host(x))
    for got, expected in zip((out, mask), single.relu_forward(x32)):
        np.testing.assert_array_equal(be.to_host(got), expected)
    np.testing.assert_array_equal(
        be.to_host(be.relu_backward(be.from_host(grad), mask)), grad32 * be.to_host(mask)
    )
    device = be.from_host(x)
    out, mask = be.fused_bias_relu(device, be.from_host(bias))
    want = x32.copy()
    for got, expected in zip((out, mask), single.fused_bias_relu(want, bias32)):
        np.testing.assert_array_equal(be.to_host(got), expected)
    np.testing.assert_array_equal(be.to_host(device), want)


@pytest.mark.parametrize("rows", [1, 33])
@pytest.mark.parametrize("cols", COLS)
def test_layer_norm(be, reference, rows, cols):
    x, gamma, beta, grad = (
        normal((rows, cols), 2),
        normal((1, cols), seed=1),
        normal((1, cols), seed=2),
        normal((rows, cols), seed=3),
    )
    got = be.layer_norm_forward(*(be.from_host(a) for a in (x, gamma, beta)))
    want = reference.layer_norm_forward(x, gamma, beta)
    for name, g, w in zip(("out", "norm", "std_inv"), got, want):
        # normalised values are O(1); 1/std is O(1/2); the cancellation in x - mean costs a few ulps
        np.testing.assert_allclose(be.to_host(g), w, atol=1e-5, err_msg=name)
    norm, std_inv = f32(be.to_host(got[1])), f32(be.to_host(got[2]))
    grads = be.layer_norm_backward(
        be.from_host(grad), be.from_host(norm), be.from_host(std_inv), be.from_host(gamma)
    )
    for name, g, w in zip(
        ("dx", "dgamma", "dbeta"), grads, reference.layer_norm_backward(grad, norm, std_inv, gamma)
    ):
        # dgamma/dbeta sum 33 O(1) products; dx subtracts two means of ~300 terms: a few float32 ulps of ~10
        np.testing.assert_allclose(be.to_host(g), w, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("rows", [1, 129, 300])  # 129 and 300: more than one chunk of 128 rows, a second pass
@pytest.mark.parametrize("cols", [1, 33])
def test_sum_rows(be, reference, rows, cols):
    x = normal((rows, cols))
    # up to 300 O(1) terms summed in float32: ~300 * 6e-8 * |partial sums| ~ 1e-4 at worst; 2e-5 is typical
    np.testing.assert_allclose(be.to_host(be.sum_rows(be.from_host(x))), reference.sum_rows(x), atol=1e-4)


def test_adam_step(be, monkeypatch):
    """Against NumPy in float32: the same float32 formula, to within a float32 ulp or two of the update."""
    monkeypatch.setattr(launch, "MAX_ELEMENT_BLOCKS", 1)  # 300 elements, one block of 256 threads
    single = NumpyBackend(np.float32)
    param, grad, m = (normal((1, 300), seed=s).astype(np.float32) for s in range(3))
    v = np.abs(normal((1, 300), seed=3)).astype(np.float32)
    device = [be.from_host(a) for a in (param, grad, m, v)]
    for t in (1, 2):
        be.adam_step(*device, 1e-2, t)
        single.adam_step(param, grad, m, v, 1e-2, t)
    for name, got, want in zip(("param", "m", "v"), (device[0], device[2], device[3]), (param, m, v)):
        np.testing.assert_allclose(be.to_host(got), want, rtol=1e-6, atol=1e-7, err_msg=name)


@pytest.mark.parametrize("grad_scale", [1.0, 0.25])
def test_adamw_step(be, monkeypatch, grad_scale):
    """Against the NumPy formula in float32 (backends/adamw.py), with decay on part of the store, a third of it
    frozen and a clipped gradient's scale: within a float32 ulp or two of each value; grad and the masks are
    left as they were."""
    monkeypatch.setattr(launch, "MAX_ELEMENT_BLOCKS", 1)  # 300 elements, one block of 256 threads
    param, grad, m = (normal((1, 300), seed=s).astype(np.float32) for s in range(3))
    v = np.abs(normal((1, 300), seed=3)).astype(np.float32)
    mask = (np.arange(300) % 3 == 0).astype(np.float32)[None, :]  # (1, 300): every third weight decays
    train = (np.arange(300) % 3 != 1).astype(np.float32)[None, :]  # (1, 300): every third is frozen
    device = [be.from_host(a) for a in (param, grad, m, v, mask, train)]
    for t in (1, 2):
        be.adamw_step(*device, 1e-2, t, 0.9, 0.99, 0.1, grad_scale)
        adamw_update(param, grad, m, v, mask, train, 1e-2, t, 0.9, 0.99, 0.1, grad_scale)
    for name, got, want in zip(("param", "m", "v"), (device[0], device[2], device[3]), (param, m, v)):
        np.testing.assert_allclose(be.to_host(got), want, rtol=1e-6, atol=1e-7, err_msg=name)
    np.testing.assert_array_equal(be.to_host(device[1]), grad)
    np.testing.assert_array_equal(be.to_host(device[4]), mask)
    np.testing.assert_array_equal(be.to_host(device[5]), train)


@pytest.mark.parametrize("dim", [1, 33, 64])
def test_rope_and_inverse(be, reference, dim):
    rows, cache_rows = 10, 4  # rows not a multiple of the cache's rows
    x = normal((rows, dim))
    angles = np.arange(cache_rows)[:, None] * np.linspace(0.1, 1, dim)[None, :]
    cos, sin = f32(np.cos(angles)), f32(np.sin(angles))
    device, want = be.from_host(x), x.copy()
    be.rope_apply(device, be.from_host(cos), be.from_host(sin))
    reference.rope_apply(want, cos, sin)
    np.testing.assert_allclose(be.to_host(device), want, atol=F32_ATOL)
    be.rope_apply_inverse(device, be.from_host(cos), be.from_host(sin))
    np.testing.assert_allclose(be.to_host(device), x, atol=F32_ATOL)


@pytest.mark.parametrize("rows,cols", [(1, 65), (40, 65), (3, 1), (5, 300)])
def test_softmax_cross_entropy(be, reference, rows, cols):
    logits = normal((rows, cols), 3)
    targets = np.random.default_rng(4).integers(0, cols, rows)
    loss, dlogits = be.fused_softmax_ce_grad(be.from_host(logits), targets)
    want_loss, want = reference.fused_softmax_ce_grad(logits, targets)
    assert loss == pytest.approx(want_loss, rel=1e-5)  # a mean of O(1) float32 row losses
    np.testing.assert_allclose(be.to_host(dlogits), want, atol=F32_ATOL)


def test_cross_entropy_of_huge_logits_is_finite(be, reference):
    logits = f32([[1e4, -1e4, 0.0], [-1e4, 1e4, 1e4]])
    loss, dlogits = be.fused_softmax_ce_grad(be.from_host(logits), np.array([1, 2]))
    want_loss, want = reference.fused_softmax_ce_grad(logits, np.array([1, 2]))
    assert loss == pytest.approx(want_loss, rel=1e-6)  # the loss is ~1e4: a float32 ulp of it is 1e-3
    np.testing.assert_allclose(be.to_host(dlogits), want, atol=F32_ATOL)


@pytest.mark.parametrize("d_model", [1, 33])
def test_embedding_gather_and_scatter_add_with_repeated_ids(be, reference, d_model, monkeypatch):
    monkeypatch.setattr(launch, "MAX_ELEMENT_BLOCKS", 1)
    ids = np.array([3, 0, 3, 3, 9, 0, 1], dtype=np.int32)
    table, grad = normal((10, d_model + 2)), normal((len(ids), d_model + 1), seed=1)
    got = be.to_host(be.embedding_gather(be.from_host(table), ids, len(ids), d_model))
    np.testing.assert_array_equal(got, reference.embedding_gather(table, ids, len(ids), d_model).astype(np.float32))
    device, want = be.from_host(table), table.copy()
    be.embedding_scatter_add(be.from_host(grad), ids, device, len(ids), d_model)
    reference.embedding_scatter_add(grad, ids, want, len(ids), d_model)
    np.testing.assert_allclose(be.to_host(device), want, atol=F32_ATOL)  # sums of up to 4 O(1) terms


# ---- attention: flash (the default) and the materialised path --------------------------------


# (heads, T, width): one position; T not a multiple of the 32-key tile nor of the 8-row block; widths 1-128
@pytest.mark.parametrize("n,t,w", [(1, 1, 1), (3, 5, 3), (2, 33, 16), (1, 70, 64), (2, 41, 128), (1, 9, 100)])
@pytest.mark.parametrize("attention", ["flash", "materialised"])
def test_causal_attention_forward_and_backward(emulated, n, t, w, attention):
    be, _ = emulated
    be.attention = attention
    rng = np.random.default_rng(w)
    q, k, v, dout = (f32(rng.normal(0, 1.5, (n, t, w))) for _ in range(4))
    scale = 1 / np.sqrt(w)
    out, saved = be.causal_attention(*(be.from_host(a) for a in (q, k, v)), scale)
    assert saved[0] == attention
    grads = be.causal_attention_backward(be.from_host(dout), saved, scale)
    want = attention_reference(q, k, v, dout, scale)
    # float32 dot products of w terms and sums over up to 70 keys of O(1) (up to O(10) for dq/dk, which
    # carry |q||k| ~ 1.5^2 w scale factors): relative float32 rounding ~1e-6 of those sizes
    for name, got, expected in zip(("out", "dq", "dk", "dv"), (out, *grads), want):
        np.testing.assert_allclose(
            be.to_host(got), expected, atol=2e-5 * max(1, np.abs(expected).max()), err_msg=name
        )


# (heads, T, width, gap): one position; T not a multiple of the 32-key tile nor of the 8-row block; keys seen after
# the gap, and a gap past the end (causal); widths 1-128
@pytest.mark.parametrize("n,t,w,gap", [(1, 1, 1, 1), (3, 5, 3, 1), (2, 33, 16, 4), (1, 70, 64, 69), (2, 41, 128, 7)])
@pytest.mark.parametrize("attention", ["flash", "materialised"])
def test_gap_attention_forward_and_backward(emulated, n, t, w, gap, attention):
    """Gap attention is the base class's materialised default whichever attention the backend was made with:
    flash attention's causal kernels never take it."""
    be, _ = emulated
    be.attention = attention
    rng = np.random.default_rng(w + gap)
    q, k, v, dout = (f32(rng.normal(0, 1.5, (n, t, w))) for _ in range(4))
    scale = 1 / np.sqrt(w)
    out, saved = be.gap_attention(*(be.from_host(a) for a in (q, k, v)), scale, gap)
    grads = be.gap_attention_backward(be.from_host(dout), saved, scale, gap)
    want = attention_reference(q, k, v, dout, scale, gap)
    # as for causal attention above: float32 dot products of w terms and sums over up to 70 keys
    for name, got, expected in zip(("out", "dq", "dk", "dv"), (out, *grads), want):
        np.testing.assert_allclose(
            be.to_host(got), expected, atol=2e-5 * max(1, np.abs(expected).max()), err_msg=name
        )


def test_flash_attention_with_huge_scores(emulated):
    """Scores of +-1e3: exp overflows unless every tile's max is subtracted first (the online softmax)."""
    be, _ = emulated
    rng = np.random.default_rng(3)
    q, k, v, dout = (f32(rng.normal(size=(2, 40, 16))) for _ in range(4))
    q *= 100.0
    out, saved = be.causal_attention(*(be.from_host(a) for a in (q, k, v)), 1.0)
    grads = be.causal_attention_backward(be.from_host(dout), saved, 1.0)
    for name, got, want in zip(("out", "dq", "dk", "dv"), (out, *grads), attention_reference(q, k, v, dout, 1.0)):
        got = be.to_host(got)
        assert np.isfinite(got).all(), name
        # scores near 1e3 carry float32 rounding of ~1e-5 relative into exp (measured: under 2.5e-5 of
        # each tensor's largest entry, dk's the worst as it carries |q| ~ 300)
        np.testing.assert_allclose(got, want, atol=1e-4 * max(1, np.abs(want).max()), err_msg=name)


@pytest.mark.parametrize("tq", [1, 2, 3])
def test_new_queries_against_a_cache_take_the_materialised_path(emulated, tq):
    """With flash attention on, Tq < Tk queries (query i at position Tk - Tq + i) run the materialised default."""
    be, _ = emulated
    assert be.attention == "flash"
    rng = np.random.default_rng(tq)
    q, k, v = f32(rng.normal(size=(2, tq, 8))), f32(rng.normal(size=(2, 5, 8))), f32(rng.normal(size=(2, 5, 8)))
    out, saved = be.causal_attention(*(be.from_host(a) for a in (q, k, v)), 0.5)
    assert saved[0] == "materialised"
    scores = np.einsum("ntw,nsw->nts", q, k) * 0.5  # (2, Tq, 5)
    scores[:, np.arange(5)[None, :] > 5 - tq + np.arange(tq)[:, None]] = -np.inf  # keys after each query's position
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    want = (probs / probs.sum(-1, keepdims=True)) @ v  # (2, Tq, 8)
    np.testing.assert_allclose(be.to_host(out), want, atol=F32_ATOL)


def test_flash_keeps_no_t_squared_tensor(emulated):
    be, _ = emulated
    t = 64
    q = be.from_host(np.zeros((2, t, 16)))
    _, (kind, saved) = be.causal_attention(q, q.copy(), q.copy(), 0.25)
    assert kind == "flash" and max(a.size for a in saved) == 2 * t * 16  # q, k, v, out; lse is 2 * t


def test_flash_is_the_default_and_the_materialised_path_is_an_option(emulated):
    assert emulated[0].attention == "flash"
    assert get_backend("cuda", attention="materialised").attention == "materialised"
    with pytest.raises(ValueError, match="flash, materialised"):
        get_backend("cuda", attention="fast")


# ---- streams: cuBLAS and the copies follow CuPy's current stream -----------------------------


def test_cublas_and_copies_run_on_the_current_stream(emulated):
    """FakeCublas fails any call whose handle is not bound to the current stream, and memcpyAsync any copy
    on another stream; a training step on a non-blocking stream makes both kinds of call."""
    from cuda_emulator.fake_cupy import Stream

    be, cublas = emulated
    config = GPTConfig(vocab_size=11, d_model=16, n_layers=1, head_dims=(8, 8), d_ff=24, seq_len=5)
    windows = np.random.default_rng(0).integers(0, 11, (2, config.seq_len + 1))
    losses = []
    for stream in (Stream(null=True), Stream(non_blocking=True)):
        with stream:
            losses.append(GPT(config, be, seed=0).train_step(windows, 1e-2))
            assert cublas.streams[be.handle] == stream.ptr and stream.synchronized  # the loss download waited
    assert cublas.calls > 0 and losses[0] == losses[1]


def test_the_fake_cublas_catches_a_call_on_another_stream(emulated):
    from cuda_emulator.fake_cupy import Stream

    be, cublas = emulated
    a = be.from_host(np.ones((2, 2)))
    be.matmul(a, a)  # bound to the null stream, which is current
    with Stream(non_blocking=True), pytest.raises(AssertionError, match="cuBLAS handle on stream 0"):
        cublas.sgemm(be.handle, 0, 0, 2, 2, 2, be._one.ctypes.data, a.data.ptr, 2, a.data.ptr, 2,
                     be._zero.ctypes.data, a.data.ptr, 2)  # fmt: skip
