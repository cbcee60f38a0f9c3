"""The model tests' shared fixture: `be`, a float64 backend of each CPU kind (numpy, and cpu with numba's
kernels), on which the hand-written backward passes are held to central differences (tests/finite_differences.py)."""

from __future__ import annotations

import numpy as np
import pytest

from microgpt.backends import get_backend


@pytest.fixture(params=["numpy", "cpu"])
def be(request):
    return get_backend(request.param, dtype=np.float64)
