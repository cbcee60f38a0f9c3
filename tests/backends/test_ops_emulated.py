"""tests/backends/test_ops.py's whole op contract, run once more on the CUDA backend on the CPU emulator.

Every test of test_ops.py that takes the `backend` fixture runs here with `backend` being a
`CuBLASBackend` whose kernels run on tests/cuda_emulator (on a GPU, test_ops.py runs them for real).
The formulas and tolerances are test_ops.py's own.
"""

from __future__ import annotations

import inspect

import pytest
import test_ops

# test_ops.py's tests that run on a backend (the others are about NumPy or the tables alone)
globals().update(
    {
        name: test
        for name, test in vars(test_ops).items()
        if name.startswith("test_") and "backend" in inspect.signature(test).parameters
    }
)


@pytest.fixture
def backend(emulated):
    return emulated[0]
