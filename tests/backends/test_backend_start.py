"""Starting a backend without asking its name: `Backend.start(threads)` makes a ready one, and the class's
`on_gpu` says whether a process must first take its own GPU.

The numpy backend sets BLAS's threads and records the count; the cpu backend takes them for BLAS, its
kernels and its slices of a batch; the cuda backend computes on the GPU and leaves the threads alone.
"""

from __future__ import annotations

import pytest

from blas_threads import blas_threads
from microgpt.backends import REGISTRY, Backend, backend_class
from microgpt.backends.cuda import CuBLASBackend
from microgpt.core.errors import ConfigError
from microgpt.core.threads import available_cores, default_threads

pytestmark = pytest.mark.usefixtures("all_cores_after")  # tests/conftest.py: each starts from every core


def test_only_the_cuda_backend_is_on_a_gpu():
    assert {name: backend_class(name).on_gpu for name in REGISTRY} == {
        "numpy": False, "cpu": False, "cuda": True, "cublas": True,
    }
    assert Backend.on_gpu is False


@pytest.mark.parametrize("name", ["numpy", "cpu"])
def test_a_cpu_backend_starts_with_the_threads_asked_for(name):
    backend = backend_class(name).start(1)
    assert backend.name == name and backend.threads == 1 and blas_threads() == {1}
    backend.finalize()
    backend = backend_class(name).start()
    assert backend.threads == default_threads() and blas_threads() == {default_threads()}
    backend.finalize()


def test_the_cpu_backend_runs_a_slice_of_the_batch_per_thread():
    backend = backend_class("cpu").start(1)
    assert backend.streams == 1
    backend.finalize()


@pytest.mark.parametrize("name", ["numpy", "cpu"])
def test_a_bad_thread_count_is_refused(name):
    with pytest.raises(ConfigError, match=f"from 1 to {available_cores()}"):
        backend_class(name).start(0)


def test_the_cuda_backend_leaves_the_threads_alone(emulated):
    before = blas_threads()
    backend = CuBLASBackend.start(threads=1)
    assert isinstance(backend, CuBLASBackend) and backend.attention == "flash"  # the default backend
    assert not hasattr(backend, "threads") and blas_threads() == before
    backend.finalize()
