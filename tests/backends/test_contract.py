"""Every registered backend implements the whole contract, and the registry picks backends correctly.

- Each class in `microgpt.backends.REGISTRY` (loaded with `backend_class`) is a
  `Backend` with no abstract method left and every training op (and the plumbing
  the model uses) present and callable, and so are our ops beyond the spec
  (`extension_ops`: attention, gap attention, AdamW, streams); the numpy and cuda
  backends also keep the whole `ReferenceAPI`, and the cuda backend alone the
  reference's device calls (`device_ops`). Together the three parts name every
  op of the reference's API (docs/ops.md).
- The short list is enough: a backend that implements only `Backend`'s abstract
  methods trains the model, and its inherited causal and gap attention give
  the float64 formulas.
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

from attention_reference import attention_reference
from microgpt.backends import CHOICES, REGISTRY, backend_class, get_backend, resolve_auto
from microgpt.backends.base import (
    Backend,
    ReferenceAPI,
    contract_ops,
    device_ops,
    extension_ops,
    reference_api_ops,
    training_ops,
)
from microgpt.model.gpt import GPT, GPTConfig

PLUMBING = ["zeros", "from_host", "to_host", "ids", "zero_", "sum_rows", "bmm"]
WITH_REFERENCE_API = ("numpy", "cuda", "cublas")  # the backends that keep the reference's whole API
WITH_DEVICE = ("cuda", "cublas")  # the backends with a device: the reference's gpu_* calls and cuBLAS handle


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_backend_class_implements_the_training_contract(name):
    cls = backend_class(name)
    assert inspect.isclass(cls) and issubclass(cls, Backend), f"{name}: {cls!r} is not a Backend"
    left = sorted(getattr(cls, "__abstractmethods__", ()))
    assert not left, f"{name} ({cls.__name__}) leaves abstract methods: {left}"
    ops = training_ops() + PLUMBING + extension_ops() + (reference_api_ops() if name in WITH_REFERENCE_API else [])
    ops += device_ops() if name in WITH_DEVICE else []
    for op in ops:
        attr = inspect.getattr_static(cls, op, None)
        assert attr is not None, f"{name} ({cls.__name__}) has no {op!r}"
        if op == "handle":
            assert isinstance(attr, property), f"{name}: handle should be a property"
        else:
            assert callable(getattr(cls, op)), f"{name}: {op!r} is not callable"
    if name in WITH_REFERENCE_API:
        assert issubclass(cls, ReferenceAPI), f"{name} should keep the reference API"
    if name not in WITH_DEVICE:  # a method that could only raise is no method
        assert not [op for op in device_ops() if inspect.getattr_static(cls, op, None) is not None], name


def test_the_two_parts_name_every_op_of_the_spec():
    """training_ops(), reference_api_ops() and device_ops() split the reference's 34 ops; every abstract method
    is in one part."""
    ops = contract_ops()
    assert len(ops) == len(set(ops)) == 34
    assert not set(training_ops()) & (set(reference_api_ops()) | set(device_ops()))
    assert set(Backend.__abstractmethods__) <= set(training_ops()) | set(PLUMBING)
    assert set(ReferenceAPI.__abstractmethods__) <= set(reference_api_ops()) | {"stack"}
    assert not set(Backend.__abstractmethods__) & set(reference_api_ops()), "training must not need the extras"
    assert not set(extension_ops()) & (set(ops) | set(Backend.__abstractmethods__)), "ours: beyond the spec, defaulted"


def test_a_backend_of_only_the_short_list_trains():
    """A Backend that implements exactly its abstract methods (here by handing each to the NumPy backend)
    takes training steps with the NumPy backend's losses: the short list is all a backend needs."""
    numpy_backend = get_backend("numpy")
    minimal = minimal_backend(numpy_backend)
    assert not isinstance(minimal, ReferenceAPI)
    config = GPTConfig(vocab_size=11, d_model=12, n_layers=2, head_dims=(2, 2, 8), d_ff=20, seq_len=6)
    windows = np.random.default_rng(0).integers(0, 11, size=(3, 7))
    minimal_model, numpy_model = GPT(config, minimal, seed=3), GPT(config, numpy_backend, seed=3)
    for _ in range(3):
        # the minimal backend runs the base class's unfused defaults, which round differently from the NumPy
        # backend's fused ops: a few float32 ulps of a loss near 2.4
        assert minimal_model.train_step(windows, 1e-2) == pytest.approx(numpy_model.train_step(windows, 1e-2), rel=1e-6)


def minimal_backend(numpy_backend: Backend) -> Backend:
    """A Backend that implements exactly its abstract methods, each by handing the call to numpy_backend."""

    def delegate(name):
        return lambda self, *args, **kwargs: getattr(numpy_backend, name)(*args, **kwargs)

    methods = {name: delegate(name) for name in Backend.__abstractmethods__}
    return type("Minimal", (Backend,), {**methods, "name": "minimal", "dtype": numpy_backend.dtype})()


def test_a_backend_of_only_the_short_list_attends():
    """The inherited defaults of causal attention (square, and 2 queries against a cache) and of gap attention,
    forward and backward, run on a backend of only the short list and give the float64 formulas of
    tests/attention_reference.py: what a new backend gets without writing any attention."""
    minimal = minimal_backend(get_backend("numpy", dtype=np.float64))
    rng = np.random.default_rng(4)
    q, k, v, dout = (rng.normal(size=(3, 6, 5)) for _ in range(4))  # (n, T, w) each
    out, saved = minimal.causal_attention(q, k, v, 0.5)
    square = (out, *minimal.causal_attention_backward(dout, saved, 0.5))
    cache = minimal.causal_attention(q[:, -2:], k, v, 0.5)[0]  # (n, 2, w): the last two positions' queries
    out, saved = minimal.gap_attention(q, k, v, 0.5, 2)
    gap = (out, *minimal.gap_attention_backward(dout, saved, 0.5, 2))
    causal, gap_want = attention_reference(q, k, v, dout, 0.5), attention_reference(q, k, v, dout, 0.5, gap=2)
    names = ("out", "dq", "dk", "dv", "cache out", "gap out", "gap dq", "gap dk", "gap dv")
    for name, got, want in zip(names, (*square, cache, *gap), (*causal, causal[0][:, -2:], *gap_want)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=name)  # float64 sums of ~30 terms


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
