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
    only q, k and v in NumPy (each has the head width, 16, as one of its last two axes), the backward dout, q, k, v
    and the two halves of the saved P for dV (kept in float32 alone, to keep attention's memory as counted)."""
    from microgpt.backends import cpu_backend

    rounded = []
    monkeypatch.setattr(cpu_backend, "bf16_bits", lambda x: rounded.append(x.shape) or bf16_bits(x))
    be = cpu_backend.CpuBackend(threads=1)
    be.use_precision("bf16")
    q, k, v, dout = (np.random.default_rng(i).standard_normal((2, QUERIES, 16)).astype(np.float32) for i in range(4))
    _, saved = be.causal_attention(q, k, v, 0.25)
    assert rounded and all(16 in shape[-2:] for shape in rounded), rounded
    rounded.clear()
    be.causal_attention_backward(dout, saved, 0.25)
    be.finalize()
    assert sorted(shape for shape in rounded if 16 not in shape[-2:]) == [(2, 32, 32), (2, QUERIES, 32)], rounded
