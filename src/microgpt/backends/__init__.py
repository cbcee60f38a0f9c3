"""Backend registry: `get_backend(name)` imports a backend only when it is asked for.

Names: "numpy" (the CPU reference), "cpu" (the NumPy backend with numba-compiled
fused kernels), "cuda" / "cublas" (CuPy and cuBLAS), and "auto", which picks CUDA
when a GPU is usable, else "cpu", and "numpy" when numba is missing or broken
(saying so in one line on stderr).
"""

from __future__ import annotations

import importlib
import sys

from microgpt.backends.base import Backend, BackendUnavailable
from microgpt.registry import BACKENDS as REGISTRY  # name -> (module, class), imported on first use only

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


__all__ = ["CHOICES", "REGISTRY", "Backend", "BackendUnavailable", "backend_class", "get_backend", "resolve_auto"]
