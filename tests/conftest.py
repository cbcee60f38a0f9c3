"""Shared fixtures: the backends under test.

`backend_name` runs a test once per registered backend kind: "numpy" and "cpu"
(numba's fused kernels; a core dependency) always, "cuda" only where CuPy and a
GPU are usable (otherwise it is skipped with the reason, and it carries the `gpu`
marker so `-m "not gpu"` deselects it).

A suite started with Ctrl-C ignored (a shell's background job: `(cmd &)`, nohup) would hand that ignore to every
subprocess it starts, and the tests that stop a child with SIGINT, as a terminal's Ctrl-C does, would find it
deaf to it. So the ignore is lifted here, once: children then start with SIGINT at its default, as from a
terminal.
"""

from __future__ import annotations

import signal

import numpy as np
import pytest

from microgpt.backends import BackendUnavailable, get_backend

if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _cuda_skip_reason() -> str | None:
    try:
        from microgpt.backends.cuda import CuBLASBackend
    except ImportError as exc:  # the module itself must import without CuPy; this is a real defect
        return f"the cuda backend module failed to import: {exc}"
    try:
        usable = CuBLASBackend.is_usable()
    except BackendUnavailable as exc:
        return str(exc)
    return None if usable else "no usable CUDA GPU (CuPy is missing or sees no device)"


CUDA_SKIP = _cuda_skip_reason()
BACKENDS = ["numpy", "cpu", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(CUDA_SKIP is not None, reason=str(CUDA_SKIP))])]


@pytest.fixture(params=BACKENDS)
def backend_name(request) -> str:
    return request.param


@pytest.fixture
def backend(backend_name):
    """A float32 backend of each available kind."""
    be = get_backend(backend_name)
    yield be
    be.finalize()


@pytest.fixture
def reference():
    """The NumPy backend in float64: the reference other backends are held against."""
    return get_backend("numpy", dtype=np.float64)
