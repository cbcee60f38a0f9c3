"""The bf16 rounding fused into the cpu backend's attention kernels: the bits the causal softmax and its backward
write (the inputs of P V, dS K and dS^T Q at --precision bf16) are exactly the specification's rounding of what
they computed (backends/bf16.py's bf16_bits: nearest, ties to even, NaN kept a quiet NaN), and the float32
results are the same with the bits asked for or not. The products that read them are held to the numpy
specification by tests/backends/test_bf16_backends.py::test_cpu_agrees_with_the_specification."""

from __future__ import annotations

import numpy as np
import pytest

from microgpt.backends import mkl_bf16
from microgpt.backends.bf16 import bf16_bits
from microgpt.backends.cpu_kernels import load

QUERIES = 64


@pytest.fixture(scope="module")
def attention():
    return load(np.float32).attention


def scores(offset: int) -> np.ndarray:
    """3 heads' (QUERIES, QUERIES + offset) scores over many scales, one row NaN (a NaN row of probabilities)."""
    rng = np.random.default_rng(offset)
    x = rng.standard_normal((3 * QUERIES, QUERIES + offset)) * np.exp(rng.uniform(-8, 5, (3 * QUERIES, 1)))
    x[7] = np.nan
    return x.astype(np.float32)


@pytest.mark.parametrize("offset", [0, QUERIES // 2])
def test_the_softmax_writes_the_specifications_rounding(attention, offset):
    s = scores(offset)
    plain, out, bits = np.empty_like(s), np.empty_like(s), np.empty(s.shape, dtype=np.uint16)
    attention.causal_softmax(s, np.float32(0.3), plain, QUERIES, offset)
    attention.causal_softmax(s, np.float32(0.3), out, QUERIES, offset, bits)
    assert np.array_equal(out, plain, equal_nan=True)
    assert np.isnan(out[7]).any() and np.array_equal(bits, bf16_bits(out))


@pytest.mark.parametrize("offset", [0, QUERIES // 2])
def test_the_softmax_backward_writes_the_specifications_rounding(attention, offset):
    s = scores(offset)
    probs = np.empty_like(s)
    attention.causal_softmax(s, np.float32(0.3), probs, QUERIES, offset)
    dprobs = np.random.default_rng(1).standard_normal(s.shape).astype(np.float32)
    plain, out, bits = np.empty_like(s), np.empty_like(s), np.empty(s.shape, dtype=np.uint16)
    attention.causal_softmax_backward(probs, dprobs, np.float32(0.3), plain, QUERIES, offset)
    attention.causal_softmax_backward(probs, dprobs, np.float32(0.3), out, QUERIES, offset, bits)
    assert np.array_equal(out, plain, equal_nan=True)
    assert np.array_equal(bits, bf16_bits(out))


@pytest.mark.skipif(mkl_bf16.unavailable() is not None, reason=mkl_bf16.unavailable() or "")
def test_the_attention_products_read_the_kernels_bits(monkeypatch):
    """At bf16 the cpu backend's two-halves attention takes P and dS rounded from their kernels: the forward rounds
    only q, k and v in a pass of their own (each has the head width, 16, as one of its last two axes), the
    backward dout, q, k, v and the two halves of the saved P for dV (kept in float32 alone, to keep attention's
    memory as counted), each as it lies in memory (P's halves untransposed)."""
    from microgpt.backends import cpu_backend

    be = cpu_backend.CpuBackend(threads=1)
    be.use_precision("bf16")
    rounded, round_words = [], be.kernels.bf16.round_words
    monkeypatch.setattr(be.kernels.bf16, "round_words", lambda w, b: rounded.append(w.shape) or round_words(w, b))
    monkeypatch.setattr(cpu_backend, "bf16_bits", None)  # no input is rounded by NumPy's passes
    q, k, v, dout = (np.random.default_rng(i).standard_normal((2, QUERIES, 16)).astype(np.float32) for i in range(4))
    _, saved = be.causal_attention(q, k, v, 0.25)
    assert rounded and all(16 in shape[-2:] for shape in rounded), rounded
    rounded.clear()
    be.causal_attention_backward(dout, saved, 0.25)
    be.finalize()
    assert sorted(shape for shape in rounded if 16 not in shape[-2:]) == [(2, 32, 32), (2, 32, QUERIES)], rounded


def every_kind_of_float32(shape) -> np.ndarray:
    """Random values over many scales with ties, the largest float32s, infinities, subnormals, signed zeros and
    NaNs (quiet, signalling, with payloads that would carry into infinity) scattered through them."""
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(shape) * np.exp(rng.uniform(-90, 80, shape))).astype(np.float32)
    special = np.array([0x3F808000, 0x3F818000, 0x7F7FFFFF, 0x7F800000, 0xFF800000, 0x00008000, 0x00018000,
                        0x007FFFFF, 0x80000000, 0x7F800001, 0x7FFFFFFF, 0xFFC00000], dtype=np.uint32)
    flat = x.reshape(-1)
    flat[rng.choice(flat.size, special.size, replace=False)] = special.view(np.float32)
    return x


@pytest.fixture(scope="module")
def backend():
    from microgpt.backends.cpu_backend import CpuBackend

    be = CpuBackend(threads=1)
    be.precision = "bf16"  # the rounding alone: MKL's products are not called here
    yield be
    be.finalize()


@pytest.mark.parametrize("view", ["whole", "slice", "transpose", "batched", "batched slice", "batched transpose"])
def test_the_compiled_rounding_is_the_specifications(backend, view):
    """`_bits`, which rounds every product input no kernel of ours made (weights, residual gradients, q, k),
    gives bf16_bits's bits for each value, in the input's shape, whatever view of memory the product reads."""
    x = every_kind_of_float32((3, 40, 24))
    x = {"whole": x[0], "slice": x[0, 5:30, 3:17], "transpose": x[0].T, "batched": x,
         "batched slice": x[:, 7:, :11], "batched transpose": x.transpose(0, 2, 1)}[view]
    bits = backend._bits(x)
    assert bits.shape == x.shape and bits.dtype == np.uint16
    assert np.array_equal(bits, bf16_bits(x))


@pytest.mark.parametrize("cols", [32, 65, 96, 384])  # 65, 96, 384: widths whose sums a vectorised loop splits
def test_layer_norm_and_the_relus_keep_the_specifications_rounding_and_their_fp32_outputs(backend, cols):
    """The three producers of a linear layer's inputs keep their output's bits as bf16_bits rounds it, and their
    float32 outputs are the fp32 run's bit for bit (LayerNorm's row sums must not change with the precision:
    rounding inside its kernel changed them at widths 65, 96 and 384)."""
    rng = np.random.default_rng(2)
    x = every_kind_of_float32((48, cols))
    x[~np.isfinite(x)] = 1.0  # LayerNorm of a row with a NaN is all NaN: the finite rows test the rounding
    x[:24] = rng.standard_normal((24, cols)) * 3 + 1  # ordinary rows too
    gamma, beta = (rng.standard_normal((1, cols)).astype(np.float32) for _ in range(2))
    backend.precision = "fp32"
    plain_ln = backend.layer_norm_forward(x, gamma, beta)[0]
    plain_hidden, mask = backend.fused_bias_relu(x.copy(), beta)
    plain_grad = backend.relu_backward(x, mask)
    backend.precision = "bf16"
    for plain, out in ((plain_ln, backend.layer_norm_forward(x, gamma, beta)[0]),
                       (plain_hidden, backend.fused_bias_relu(x.copy(), beta)[0]),
                       (plain_grad, backend.relu_backward(x, mask))):
        assert np.array_equal(out, plain, equal_nan=True)
        assert np.array_equal(backend._rounded.find(out), bf16_bits(out))


def test_a_kept_output_is_rounded_once_read_only_and_forgotten_with_it(backend, monkeypatch):
    """A ReLU's output, read as it is, reshaped and transposed (a weight gradient's x^T), is never rounded
    again; a write into it is refused rather than leaving its bits stale; its bits go when it does."""
    rng = np.random.default_rng(3)
    x, beta = (rng.standard_normal(shape).astype(np.float32) for shape in ((64, 32), (1, 32)))
    out = backend.fused_bias_relu(x, beta)[0]
    calls = []
    monkeypatch.setattr(backend.kernels.bf16, "round_words", lambda w, b: calls.append(w.shape))
    for view in (out, out.reshape(2, 32, 32), out.T):
        assert np.array_equal(backend._bits(view), bf16_bits(view))
    assert calls == []
    backend._bits(out[1:])  # a part of it is not what the kernel rounded: rounded afresh
    assert calls == [(1, 63, 32)]
    with pytest.raises(ValueError, match="read-only"):
        out[0, 0] = 1.0
    kept = len(backend._rounded._kept)
    del out, view
    assert len(backend._rounded._kept) == kept - 1
