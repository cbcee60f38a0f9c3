"""Every registered backend implements the whole contract, and the registry picks backends correctly.

- Each class in `microgpt.backends.REGISTRY` (loaded with `backend_class`) is a
  `Backend` with no abstract method left and every name of `contract_ops()` (and
  the plumbing methods the model uses) present and callable, or a property.
  This needs no GPU and no CuPy: the cuda backend module must import without
  CuPy (checked in a subprocess where `import cupy` is made to fail, so it holds
  on machines that have CuPy too). A missing cuda module is a failure, not a skip.
- `get_backend`: "numpy" works, an unknown name is a ValueError listing the
  choices, and "auto" means the cpu backend where no GPU is usable (its
  fallback to NumPy without numba is tested in test_cpu_backend.py).
"""

from __future__ import annotations

import importlib.util
import inspect
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from microgpt.backends import CHOICES, REGISTRY, backend_class, get_backend, resolve_auto
from microgpt.backends.base import Backend, contract_ops

PLUMBING = ["zeros", "from_host", "to_host", "ids", "zero_", "sum_rows", "stack", "bmm"]


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_backend_class_implements_every_contract_op(name):
    cls = backend_class(name)
    assert inspect.isclass(cls) and issubclass(cls, Backend), f"{name}: {cls!r} is not a Backend"
    left = sorted(getattr(cls, "__abstractmethods__", ()))
    assert not left, f"{name} ({cls.__name__}) leaves abstract methods: {left}"
    for op in contract_ops() + PLUMBING:
        attr = inspect.getattr_static(cls, op, None)
        assert attr is not None, f"{name} ({cls.__name__}) has no {op!r}"
        if op == "handle":
            assert isinstance(attr, property), f"{name}: handle should be a property"
        else:
            assert callable(getattr(cls, op)), f"{name}: {op!r} is not callable"


def test_contract_ops_names_every_abstract_op():
    """contract_ops() is the spec's list: every abstract method of Backend is either a contract op or plumbing."""
    ops = contract_ops()
    assert len(ops) == len(set(ops)) == 34
    assert set(Backend.__abstractmethods__) <= set(ops) | set(PLUMBING)


def test_cuda_backend_module_imports_without_cupy():
    """Where `import cupy` fails, the cuda backend module still imports and says it is not usable."""
    script = textwrap.dedent(
        """
        import sys
        sys.modules["cupy"] = None  # makes `import cupy` (and cupy.*) raise ImportError
        for sub in ("cupy.cuda", "cupy_backends", "cupyx"):
            sys.modules[sub] = None
        from microgpt.backends import backend_class, resolve_auto, get_backend
        cls = backend_class("cuda")
        assert cls.__name__ == "CuBLASBackend", cls
        assert backend_class("cublas") is cls
        assert cls.is_usable() is False, "no CuPy: the cuda backend must say it is not usable"
        assert resolve_auto() == "cpu", resolve_auto()
        assert get_backend("auto").name == "cpu"
        print("ok")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr or done.stdout


def test_cuda_backend_has_is_usable():
    cls = backend_class("cuda")
    assert callable(getattr(cls, "is_usable", None)), "resolve_auto needs CuBLASBackend.is_usable()"


def test_get_backend_numpy():
    be = get_backend("numpy")
    assert be.name == "numpy"
    assert be.dtype == np.float32
    assert get_backend("numpy", dtype=np.float64).dtype == np.float64


def test_unknown_backend_is_a_value_error_listing_the_choices():
    with pytest.raises(ValueError) as info:
        get_backend("tpu")
    message = str(info.value)
    assert "tpu" in message
    for choice in CHOICES:
        assert choice in message, f"the error should list {choice!r}: {message!r}"


def gpu_count() -> int:
    """CUDA devices CuPy sees, asked directly (not through our backend); 0 without CuPy or a driver."""
    if importlib.util.find_spec("cupy") is None:
        return 0
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount())
    except (RuntimeError, ImportError, OSError):  # no driver, an old driver, no device: no usable GPU
        return 0


def test_auto_is_cpu_without_a_gpu():
    """"auto" is CUDA exactly when a GPU is usable here; on a machine without one it is the cpu backend."""
    expected = "cuda" if gpu_count() > 0 else "cpu"
    assert backend_class("cuda").is_usable() is (expected == "cuda")
    assert resolve_auto() == expected
    be = get_backend("auto")
    assert be.name == expected
    be.finalize()
