"""What a test needs from an optional extra: `need(module)` and `needs(module)`.

A test asks for what an optional extra brings (the studio's starlette, mpi4py, pyarrow, onnx, tensorboardX,
torch) through these: after `pip install -e ".[test]"` alone, every such test skips with a reason that names the
module, the extra and the command that installs it, and the rest of the suite passes.
"""

from __future__ import annotations

import importlib.util

import pytest

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


def known(module: str) -> None:
    """Refuse a name that is no module an extra brings (need("studio") would skip a test on every machine)."""
    top = module.split(".")[0]
    if top not in EXTRAS and top not in NOT_IN_AN_EXTRA:
        raise ValueError(f"{module!r} is not a module of an extra; name one of {sorted({**EXTRAS, **NOT_IN_AN_EXTRA})}")


def installed(module: str) -> bool:
    return importlib.util.find_spec(module.split(".")[0]) is not None


def need(module: str):
    """The module imported, or the test (or, at a module's top level, the whole file) skipped with the reason."""
    __tracebackhide__ = True  # the skip is reported at the line that asked, not here
    known(module)
    return pytest.importorskip(module, reason=missing_reason(module))


def needs(*modules: str) -> pytest.MarkDecorator:
    """A mark that skips a test, with the reason, unless every one of `modules` is installed."""
    for module in modules:
        known(module)
    missing = [module for module in modules if not installed(module)]
    return pytest.mark.skipif(bool(missing), reason=missing_reason(missing[0]) if missing else "")
