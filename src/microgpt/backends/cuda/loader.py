"""Finding CuPy and cuBLAS, and the CUDA C sources the CUDA backend compiles.

`load_cupy` imports CuPy only when a CUDA backend is made (or `is_usable`
asks), and turns every way that can fail into a `BackendUnavailable` naming
what is missing and the command that fixes it. `kernel_source` gives the text
NVRTC compiles for one `kernels/*.cu` file; `MODULES` caches the compiled
modules for the life of the process.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from microgpt.backends.base import BackendUnavailable
from microgpt.backends.constants import kernel_defines
from microgpt.core.version import install_hint

KERNEL_DIR = Path(__file__).with_name("kernels")
INCLUDE_LINE = re.compile(r'^#include "([\w.]+\.cu)"$', re.MULTILINE)
INSTALL_HINT = f"{install_hint('cuda13')}, or [cuda12] for a CUDA 12 driver"
LIBRARIES_HINT = "pip install 'cupy-cuda13x[ctk]' (or 'cupy-cuda12x[ctk]') to get the CUDA libraries"

# (kernel file, device id) -> cupy.RawModule: compiled once per process, shared by all backends
MODULES: dict[tuple[str, int], Any] = {}


def kernel_files() -> list[str]:
    """The kernel source files, by name."""
    return sorted(path.name for path in KERNEL_DIR.glob("*.cu"))


def kernel_source(file_name: str) -> str:
    """The text NVRTC compiles for one kernel file: the shared constants as `#define`s, then the file with
    each `#include "x.cu"` replaced by that file's text.

    Pasting the constants and includes in (rather than giving NVRTC an include path) puts them into
    CuPy's cache key, so an edited helper or constant can never be served from a stale cached binary.
    """
    return kernel_defines() + _expand_includes(file_name)


def _expand_includes(file_name: str) -> str:
    text = (KERNEL_DIR / file_name).read_text(encoding="utf-8")
    return INCLUDE_LINE.sub(lambda match: _expand_includes(match.group(1)), text)


def load_cupy():
    """(cupy, cublas), or BackendUnavailable naming what is missing and how to get it."""
    try:
        import cupy
    except ImportError as exc:
        raise BackendUnavailable(
            f"CuPy is not installed ({exc}); the cuda backend needs it: {INSTALL_HINT}"
        ) from None
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # noqa: BLE001 - no driver, no device, a broken CUDA runtime: all mean "no GPU"
        raise BackendUnavailable(
            f"CuPy found no CUDA GPU ({exc}); the cuda backend needs an NVIDIA GPU and driver "
            "(use --backend numpy here)"
        ) from None
    if count == 0:
        raise BackendUnavailable(
            "CuPy found no CUDA GPU; the cuda backend needs one (use --backend numpy here)"
        )
    try:
        from cupy_backends.cuda.libs import cublas
    except ImportError as exc:
        raise BackendUnavailable(f"CuPy cannot load cuBLAS ({exc}): {LIBRARIES_HINT}") from None
    return cupy, cublas
