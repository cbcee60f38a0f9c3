"""Shared fixtures: the backends under test.

`backend_name` runs a test once per registered backend kind: "numpy" and "cpu"
(numba's fused kernels; a core dependency) always, "cuda" only where CuPy and a
GPU are usable (otherwise it is skipped with the reason, and it carries the `gpu`
marker so `-m "not gpu"` deselects it).

A suite started with Ctrl-C ignored (a shell's background job: `(cmd &)`, nohup) would hand that ignore to every
subprocess it starts, and the tests that stop a child with SIGINT, as a terminal's Ctrl-C does, would find it
deaf to it. So the ignore is lifted here, once: children then start with SIGINT at its default, as from a
terminal.

`PeakMemory` is how a test says that some work stays small ("refused before anything is allocated", "not made
one by one"): the bytes Python allocated at the peak, which other jobs' load cannot change, where a time bound
would fail on a slow or busy machine.

`need(module)` and `needs(module)` are how a test asks for what an optional extra brings (the studio's starlette,
mpi4py, pyarrow, onnx, tensorboardX, torch): after `pip install -e ".[test]"` alone, every such test skips with a
reason that names the module, the extra and the command that installs it, and the rest of the suite passes.
"""

from __future__ import annotations

import importlib.util
import signal
import tracemalloc

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
    return None if usable else ('no usable CUDA GPU (CuPy is missing or sees no device; on a machine with one, '
                                'pip install -e ".[cuda13]" or ".[cuda12]")')


CUDA_SKIP = _cuda_skip_reason()
BACKENDS = ["numpy", "cpu", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(CUDA_SKIP is not None, reason=str(CUDA_SKIP))])]

# module: the extra of pyproject.toml that brings it (the test extra brings matplotlib, as the plot extra does)
EXTRAS = {"starlette": "studio", "anyio": "studio", "uvicorn": "studio", "httpx": "studio", "selenium": "studio",
          "mpi4py": "mpi", "mpich": "mpi", "pyarrow": "data", "zstandard": "data", "tensorboardX": "tensorboard",
          "onnx": "export", "onnxruntime": "export", "matplotlib": "plot", "cupy": "cuda13"}
# what the extras leave out: PyTorch is a download of its own (.ci/run installs a CPU wheel where one is at hand)
NOT_IN_AN_EXTRA = {"torch": "pip install torch (a CPU build will do)"}


def missing_reason(module: str) -> str:
    """Why a test that needs `module` skips: the module, and the extra and command that bring it."""
    top = module.split(".")[0]
    if top in EXTRAS:
        return f'{top} is not installed: the {EXTRAS[top]} extra brings it (pip install -e ".[{EXTRAS[top]}]")'
    return f"{top} is not installed: {NOT_IN_AN_EXTRA.get(top, f'pip install {top}')}"


def installed(module: str) -> bool:
    return importlib.util.find_spec(module.split(".")[0]) is not None


def need(module: str):
    """The module imported, or the test (or, at a module's top level, the whole file) skipped with the reason."""
    __tracebackhide__ = True  # the skip is reported at the line that asked, not here
    return pytest.importorskip(module, reason=missing_reason(module))


def needs(*modules: str) -> pytest.MarkDecorator:
    """A mark that skips a test, with the reason, unless every one of `modules` is installed."""
    missing = [module for module in modules if not installed(module)]
    return pytest.mark.skipif(bool(missing), reason=missing_reason(missing[0]) if missing else "")


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


class PeakMemory:
    """`with PeakMemory() as memory: ...`, then `memory.bytes`: the most Python held at once inside the block,
    above what it held before (tracemalloc, every thread)."""

    def __enter__(self):
        self.bytes = None
        tracemalloc.start()
        return self

    def __exit__(self, *exc) -> None:
        self.bytes = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
