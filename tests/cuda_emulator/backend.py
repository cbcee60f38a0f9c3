"""The `emulated` fixture (import `emulated_backend` to use it): a `CuBLASBackend` whose CuPy is `fake_cupy` and whose cuBLAS is `FakeCublas`.

The backend's own Python runs unchanged; only `loader.load_cupy` is replaced. Its kernels run on the
emulator, compiled from exactly the text the backend hands `RawModule`. The process-wide module
cache is emptied for the test and restored after, so an emulated module never reaches a real
backend in the same session.
"""

from __future__ import annotations

import pytest

from cuda_emulator.build import GXX
from cuda_emulator.fake_cupy import FakeCublas, fake_cupy
from microgpt.backends.cuda import CuBLASBackend, loader


@pytest.fixture(name="emulated")
def emulated_backend(monkeypatch):
    """(backend, cublas): a CuBLASBackend on the CPU emulator, and its fake cuBLAS (skipped without g++)."""
    if GXX is None:
        pytest.skip("g++ is not on PATH; the CUDA emulator needs it")
    cublas = FakeCublas()
    saved = dict(loader.MODULES)
    loader.MODULES.clear()
    monkeypatch.setattr(loader, "load_cupy", lambda: (fake_cupy(), cublas))
    backend = CuBLASBackend()
    yield backend, cublas
    backend.finalize()
    loader.MODULES.clear()
    loader.MODULES.update(saved)
