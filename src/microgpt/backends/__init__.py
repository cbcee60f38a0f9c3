"""The compute backends behind one contract (base.py): numpy (the plain reference), cpu (numba kernels on numpy)
and cuda (CuPy, cuBLAS and our kernels), each imported only when asked for. `start_backend` starts the one a
run asked for; "auto" is cuda where a GPU is usable, else cpu (numpy where numba is broken), and says so.
It imports only core/ and itself; the model and the library above it use a backend through the contract
and this registry, never a concrete backend.
"""

from __future__ import annotations

import importlib
import sys

from microgpt.backends.base import Backend, BackendUnavailable
from microgpt.core.registry import BACKENDS as REGISTRY  # name -> (module, class), imported on first use only

CHOICES = ("auto", *REGISTRY)


def backend_class(name: str) -> type[Backend]:
    if name not in REGISTRY:
        raise ValueError(f"unknown backend {name!r}; choose one of: {', '.join(CHOICES)}")
    module_name, class_name = REGISTRY[name]
    return getattr(importlib.import_module(module_name), class_name)


def get_backend(name: str = "auto", **options) -> Backend:
    """A ready backend. "auto" is CUDA when a GPU is usable, else cpu (numpy without numba); see `resolve_auto`."""
    if name == "auto":
        name = resolve_auto()
    return backend_class(name)(**options)


def resolve_auto() -> str:
    """The backend "auto" stands for here: "cuda" when CuPy imports and sees a GPU, else "cpu" when numba
    works, else "numpy" (with one line on stderr saying why)."""
    try:
        if backend_class("cuda").is_usable():
            return "cuda"
    except (ImportError, BackendUnavailable):
        pass
    from microgpt.backends.cpu_kernels import load

    try:
        load("float32")
    except BackendUnavailable as exc:
        print(f"microgpt: backend auto falls back to numpy: {exc}", file=sys.stderr)
        return "numpy"
    return "cpu"


def start_backend(name: str, comm=None, threads: int | None = None) -> tuple[Backend, str | None]:
    """The backend a run asked for, and for "auto" a note saying which one it picked and why. A backend on the
    CPU uses `threads` for BLAS and its kernels (default: threads.default_threads). With several processes on
    the GPU, each first takes its own GPU (`comm.use_local_gpu`, the communicator of parallel/)."""
    picked = resolve_auto() if name == "auto" else name
    kind = backend_class(picked)
    if comm is not None and kind.on_gpu:
        comm.use_local_gpu()
    backend = kind.start(threads)
    if name != "auto":
        return backend, None
    return backend, f"backend: {picked} (auto: {'a GPU is usable' if kind.on_gpu else 'no usable GPU'})"


__all__ = ["CHOICES", "REGISTRY", "Backend", "BackendUnavailable", "backend_class", "get_backend", "resolve_auto", "start_backend"]
