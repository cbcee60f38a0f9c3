"""The backend kinds under test: "numpy" and "cpu" (numba's fused kernels; a core dependency) always, "cuda" only
where CuPy and a GPU are usable (otherwise skipped with `CUDA_SKIP`, the reason, and carrying the `gpu` marker so
`-m "not gpu"` deselects it)."""

from __future__ import annotations

import pytest

from microgpt.backends import BackendUnavailable


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
