"""MKL's bf16 product (backends/mkl_bf16.py) against the specification: the float32 product of the inputs rounded
to bf16 (numpy), within float32 accumulation-order error; and the capability check's one-line reasons."""

from pathlib import Path

import numpy as np
import pytest

from microgpt.backends import mkl_bf16
from microgpt.backends.bf16 import bf16_bits, round_bf16

MISSING = mkl_bf16.unavailable()
needs_bf16 = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")

SHAPES = [((64, 32), (32, 48), False, False), ((32, 64), (32, 48), True, False), ((64, 32), (48, 32), False, True),
          ((32, 64), (48, 32), True, True), ((1, 200), (200, 1), False, False), ((4, 5, 7), (4, 7, 3), False, False),
          ((4, 7, 5), (4, 3, 7), True, True), ((768, 128), (128, 512), False, False)]


def spec(a, b, transpose_a, transpose_b):
    a = np.swapaxes(a, -1, -2) if transpose_a else a
    b = np.swapaxes(b, -1, -2) if transpose_b else b
    return round_bf16(a).astype(np.float64) @ round_bf16(b).astype(np.float64)


@needs_bf16
@pytest.mark.parametrize("a_shape, b_shape, transpose_a, transpose_b", SHAPES)
def test_mkl_product_is_the_product_of_the_rounded_inputs(a_shape, b_shape, transpose_a, transpose_b):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(a_shape).astype(np.float32), rng.standard_normal(b_shape).astype(np.float32)
    out = mkl_bf16.bf16_matmul(a, b, transpose_a, transpose_b)
    exact = spec(a, b, transpose_a, transpose_b)  # float64: the rounded inputs' products are exact
    k = (a_shape[-2] if transpose_a else a_shape[-1])
    magnitude = np.abs(round_bf16(np.swapaxes(a, -1, -2) if transpose_a else a)).astype(np.float64) @ \
        np.abs(round_bf16(np.swapaxes(b, -1, -2) if transpose_b else b)).astype(np.float64)
    assert out.dtype == np.float32 and out.shape == exact.shape
    assert np.all(np.abs(out - exact) <= k * 2.0**-24 * magnitude + 1e-30)  # float32 accumulation, any order
    float32_product = (np.swapaxes(a, -1, -2) if transpose_a else a) @ (np.swapaxes(b, -1, -2) if transpose_b else b)
    assert np.abs(out - float32_product).max() > 1e-4  # it did round: the plain float32 product differs


@needs_bf16
def test_into_slices_and_accumulate():
    """gemm_bits writes into a strided slice of a bigger array (rows apart) and adds with accumulate."""
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((3, 6, 4)).astype(np.float32), rng.standard_normal((3, 8, 4)).astype(np.float32)
    out = np.ones((3, 6, 10), dtype=np.float32)
    mkl_bf16.gemm_bits(bf16_bits(a), bf16_bits(b).transpose(0, 2, 1), out[:, :, 1:9], accumulate=True)
    expected = 1 + spec(a, b, False, True)
    assert np.allclose(out[:, :, 1:9], expected, rtol=1e-5, atol=1e-5)
    assert np.all(out[:, :, 0] == 1) and np.all(out[:, :, 9] == 1)


def test_unavailable_names_what_is_missing_and_the_fix():
    no_feature = mkl_bf16.unavailable(flags={"avx512f", "avx2"}, library=None)
    assert "AMX-BF16 or AVX512-BF16" in no_feature and "--backend numpy" in no_feature and "\n" not in no_feature
    no_mkl = mkl_bf16.unavailable(flags={"avx512_bf16"}, library=None)
    assert "MKL" in no_mkl and '".[mkl]"' in no_mkl and "\n" not in no_mkl
    assert mkl_bf16.unavailable(flags={"amx_bf16"}, library=Path("libmkl_rt.so.3")) is None
