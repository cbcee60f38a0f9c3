"""--precision bf16 on the backends: the numpy backend's products are float32 products of the bf16-rounded inputs
(the specification), the cpu backend's (MKL) agree with them within float32 accumulation error, every product
entry point takes the precision, and a backend without bf16 refuses it in one line."""

from types import SimpleNamespace

import numpy as np
import pytest

from microgpt.backends import BackendUnavailable, mkl_bf16
from microgpt.backends.base import Backend
from microgpt.backends.bf16 import round_bf16
from microgpt.backends.numpy_backend import NumpyBackend

MISSING = mkl_bf16.unavailable()
needs_bf16 = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")
RNG = np.random.default_rng(0)


def arrays(*shapes):
    return [RNG.standard_normal(shape).astype(np.float32) for shape in shapes]


def spec_numpy():
    backend = NumpyBackend()
    backend.use_precision("bf16")
    return backend


def cpu_bf16():
    from microgpt.backends.cpu_backend import CpuBackend

    backend = CpuBackend(threads=1)
    backend.use_precision("bf16")
    return backend


def test_numpy_products_read_rounded_inputs():
    be = spec_numpy()
    a, b, c = arrays((24, 40), (40, 16), (16, 40))
    exact = round_bf16(a).astype(np.float64) @ round_bf16(b).astype(np.float64)
    assert np.allclose(be.matmul(a, b), exact, rtol=1e-5, atol=1e-5)
    assert np.abs(be.matmul(a, b) - a @ b).max() > 1e-3  # rounded: not the float32 product
    assert np.allclose(be.matmul(a, c, transpose_b=True), be.matmul(a, c.T.copy()), rtol=1e-5, atol=1e-5)
    dst = np.ones((24, 16), dtype=np.float32)
    be.matmul_into(a, b, dst, accumulate=True)
    assert np.array_equal(dst, 1 + be.matmul(a, b))
    x, y = arrays((3, 8, 5), (3, 8, 6))
    assert np.array_equal(be.bmm(x, y, True, False), round_bf16(x).transpose(0, 2, 1) @ round_bf16(y))


def test_fp32_is_the_default_and_untouched():
    be = NumpyBackend()
    a, b = arrays((8, 9), (9, 7))
    assert be.precision == "fp32" and np.array_equal(be.matmul(a, b), a @ b)


def test_attention_products_take_the_precision():
    """causal_attention (the default's bmm products) at bf16 differs from fp32 as rounding does, no more."""
    q, k, v = arrays((2, 6, 4), (2, 6, 4), (2, 6, 4))
    fp32, _ = NumpyBackend().causal_attention(q, k, v, 0.5)
    bf16, _ = spec_numpy().causal_attention(q, k, v, 0.5)
    assert 1e-4 < np.abs(bf16 - fp32).max() < 0.05


@needs_bf16
@pytest.mark.parametrize("seq_len", [8, 64])  # 64: the cpu backend's two-halves attention
def test_cpu_agrees_with_the_specification(seq_len):
    spec, cpu = spec_numpy(), cpu_bf16()
    a, b = arrays((seq_len * 3, 32), (32, 48))
    assert np.allclose(cpu.matmul(a, b), spec.matmul(a, b), rtol=1e-5, atol=1e-5)
    assert np.allclose(cpu.matmul(b, a, True, True), spec.matmul(b, a, True, True), rtol=1e-5, atol=1e-5)
    dst, ref = np.ones((32, 32), np.float32), np.ones((32, 32), np.float32)
    cpu.matmul_into(a, a, dst, transpose_a=True, accumulate=True)
    spec.matmul_into(a, a, ref, transpose_a=True, accumulate=True)
    assert np.allclose(dst, ref, rtol=1e-5, atol=1e-4)
    into_columns, ref_columns = (np.ones((48, seq_len * 3), np.float32) for _ in range(2))  # dst.T: strided rows
    cpu.matmul_into(a, b, into_columns.T, accumulate=True)
    spec.matmul_into(a, b, ref_columns.T, accumulate=True)
    assert np.allclose(into_columns, ref_columns, rtol=1e-5, atol=1e-4)
    q, k, v, dout = arrays(*[(4, seq_len, 16)] * 4)
    out, saved = cpu.causal_attention(q, k, v, 0.25)
    ref_out, ref_saved = spec.causal_attention(q, k, v, 0.25)
    # the softmax kernels' float32 differs from numpy's in the last bit, which can move a probability across a
    # bf16 rounding boundary: one bf16 step (2^-8 of it) in an input of the next product, no more
    for got, want in zip((out, *cpu.causal_attention_backward(dout, saved, 0.25)),
                         (ref_out, *spec.causal_attention_backward(dout, ref_saved, 0.25))):
        assert np.abs(got - want).max() <= 2.0**-8 * np.abs(want).max()
    cpu.finalize()


def test_cpu_refuses_bf16_in_one_line_where_it_cannot(monkeypatch):
    from microgpt.backends.cpu_backend import CpuBackend

    reason = mkl_bf16.unavailable(flags={"avx2"}, library=None)
    monkeypatch.setattr(mkl_bf16, "unavailable", lambda: reason)
    be = CpuBackend(threads=1)
    with pytest.raises(BackendUnavailable, match="AMX-BF16 or AVX512-BF16") as caught:
        be.use_precision("bf16")
    assert "\n" not in str(caught.value) and be.precision == "fp32"
    be.finalize()


def test_a_backend_without_bf16_refuses_it():
    """The contract's default (a backend with no bf16 of its own) has fp32 alone."""
    other = SimpleNamespace(name="other")
    with pytest.raises(BackendUnavailable, match="--precision bf16 on the other backend is not built yet"):
        Backend.use_precision(other, "bf16")
    Backend.use_precision(other, "fp32")
    assert other.precision == "fp32"
