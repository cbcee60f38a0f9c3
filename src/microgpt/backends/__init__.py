"""Backend registry: `get_backend(name)` imports a backend only when it is asked for.

Names: "numpy" (the CPU reference), "cuda" / "cublas" (CuPy and cuBLAS), and
"auto", which picks CUDA only when a GPU is usable and NumPy otherwise.
"""

from __future__ import annotations

import importlib

from microgpt.backends.base import Backend, BackendUnavailable

# name -> (module, class); modules are imported on first use only.
REGISTRY: dict[str, tuple[str, str]] = {
    "numpy": ("microgpt.backends.numpy_backend", "NumpyBackend"),
    "cuda": ("microgpt.backends.cuda_backend", "CuBLASBackend"),
    "cublas": ("microgpt.backends.cuda_backend", "CuBLASBackend"),
}

CHOICES = ("auto", *REGISTRY)


def backend_class(name: str) -> type[Backend]:
    if name not in REGISTRY:
        raise ValueError(f"unknown backend {name!r}; choose one of: {', '.join(CHOICES)}")
    module_name, class_name = REGISTRY[name]
    return getattr(importlib.import_module(module_name), class_name)


def get_backend(name: str = "auto", **options) -> Backend:
    """A ready backend. "auto" is CUDA when a GPU is usable, else NumPy; see `resolve_auto`."""
    if name == "auto":
        name = resolve_auto()
    return backend_class(name)(**options)


def resolve_auto() -> str:
    """The backend "auto" stands for here: "cuda" when CuPy imports and sees a GPU, else "numpy"."""
    try:
        cls = backend_class("cuda")
    except (ImportError, BackendUnavailable):
        return "numpy"
    return "cuda" if cls.is_usable() else "numpy"


__all__ = ["CHOICES", "REGISTRY", "Backend", "BackendUnavailable", "backend_class", "get_backend", "resolve_auto"]
