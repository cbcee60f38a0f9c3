"""benchmarks/product_clock.py, which docs/cpu.md's table of where a step's time goes rests on: it counts each
product's FLOPs once (2 k per entry of the result, a product that calls itself counted once), and puts the cpu
backend's product back as it was when the block ends."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from microgpt.backends import mkl_bf16
from microgpt.backends.cpu_backend import CpuBackend

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "product_clock.py"


@pytest.fixture(scope="module")
def clock_module():
    spec = importlib.util.spec_from_file_location("product_clock_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def test_flops_counted_once_a_product_and_the_method_restored(clock_module):
    pytest.importorskip("numba")
    backend = CpuBackend(threads=1)
    if mkl_bf16.mkl_library_path() is not None:
        backend.blas = "mkl"  # MKL writes whole rows: a strided out makes the product call itself
    original = CpuBackend._product
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((5, 7), dtype=np.float32), rng.standard_normal((7, 3), dtype=np.float32)
    q, k = rng.standard_normal((2, 4, 6), dtype=np.float32), rng.standard_normal((2, 6, 4), dtype=np.float32)
    strided = np.empty((5, 6), dtype=np.float32)[:, ::2]  # (5, 3), every other column
    with clock_module.ProductClock() as clock:
        np.testing.assert_allclose(backend.matmul(a, b), a @ b, rtol=1e-5, atol=1e-5)
        backend.bmm(q, k)
        backend._product(a, b, strided)
    assert clock.flops == 2 * 7 * 15 + 2 * 6 * 32 + 2 * 7 * 15
    assert clock.product_seconds > 0
    assert CpuBackend._product is original
