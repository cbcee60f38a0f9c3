"""`CuBLASBackend`: the CUDA backend, composed of one mixin per idea of this package.

Every Mat is a float32 `cupy.ndarray` on the current CuPy device. The products
go through cuBLAS (gemm.py); the row and element-wise ops are our CUDA C kernels
in `kernels/*.cu`, compiled with NVRTC by `cupy.RawModule` on first use and kept
for the life of the process (kernel_launch.py; CuPy also caches the binaries on disk).
This class holds the state the mixins share, which `__init__` sets.

At --precision bf16 (`use_precision`) the products read their inputs rounded to
bfloat16 and accumulate in float32 on the tensor cores (gemm.py); the kernels that make
a product's input write its bfloat16 bits beside it (rounding.py), and attention takes
the materialised path, whose products are those; every Mat stays float32.

This module imports without CuPy: CuPy is imported when a backend is made (or
`is_usable` asks), and its absence is a `BackendUnavailable` with the fix.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from microgpt.backends.base import Backend, BackendUnavailable, ReferenceAPI
from microgpt.backends.bf16 import check_precision
from microgpt.backends.cuda import loader
from microgpt.backends.cuda.adam import AdamKernels
from microgpt.backends.cuda.arrays import DeviceArrays
from microgpt.backends.cuda.attention import ATTENTION_KINDS, FlashAttention
from microgpt.backends.cuda.device_memory import DeviceMemory
from microgpt.backends.cuda.elementwise import ElementwiseKernels
from microgpt.backends.cuda.embedding import EmbeddingKernels
from microgpt.backends.cuda.gemm import CublasProducts
from microgpt.backends.cuda.kernel_launch import KernelLaunches
from microgpt.backends.cuda.layer_norm import LayerNormKernels
from microgpt.backends.cuda.rounding import RoundsInputs
from microgpt.backends.cuda.softmax import SoftmaxKernels
from microgpt.backends.rounded_outputs import RoundedOutputs


class CuBLASBackend(
    DeviceArrays, KernelLaunches, CublasProducts, SoftmaxKernels, LayerNormKernels, ElementwiseKernels,
    EmbeddingKernels, AdamKernels, FlashAttention, DeviceMemory, RoundsInputs, Backend, ReferenceAPI,
):
    """float32 on the current CuPy device. Raises BackendUnavailable when CuPy, a GPU or cuBLAS is missing."""

    name = "cuda"
    on_gpu = True

    def __init__(self, attention: str = "flash"):
        """attention: "flash" (fused kernels, O(T) memory per head; the default) or "materialised"
        (the base class's path, which keeps the (T, T) probabilities of every head)."""
        if attention not in ATTENTION_KINDS:
            raise ValueError(f"attention must be one of {', '.join(ATTENTION_KINDS)}, got {attention!r}")
        self.attention = attention
        self._cp, self._cublas = loader.load_cupy()
        self.dtype = np.dtype(np.float32)
        self.device_id = self._cp.cuda.runtime.getDevice()
        self._handle = self._cublas.create()
        # cuBLAS reads alpha and beta through host pointers (its default pointer mode).
        self._one, self._zero = np.ones(1, np.float32), np.zeros(1, np.float32)
        self._raw_allocations: set[int] = set()  # pointers from gpu_alloc not yet freed
        self._kernels: dict[tuple[str, str], Any] = {}
        self.transfers = {"to_device": 0, "to_host": 0}
        self._rounded = RoundedOutputs(protect=False)  # at bf16, the bits our kernels wrote beside their outputs

    def use_precision(self, precision):
        """bf16 needs bf16 tensor cores (compute capability 8.0, Ampere, or later): on an older GPU, one line
        naming it and the fix (BackendUnavailable); the precision is then left as it was."""
        if check_precision(precision) == "bf16":
            major, minor = divmod(int(self._cp.cuda.Device(self.device_id).compute_capability), 10)
            if major < 8:
                name = self._cp.cuda.runtime.getDeviceProperties(self.device_id)["name"]
                name = name.decode() if isinstance(name, bytes) else name
                raise BackendUnavailable(
                    f"--precision bf16 on the cuda backend needs bf16 tensor cores (compute capability 8.0 or "
                    f"later), and {name} (device {self.device_id}) is {major}.{minor}; train at --precision fp32 "
                    "on this GPU, or at bf16 on an Ampere or newer GPU or with --backend cpu"
                )
        self.precision = precision

    @classmethod
    def is_usable(cls) -> bool:
        """True when CuPy imports, sees a GPU and loads cuBLAS; never raises."""
        try:
            loader.load_cupy()
        except Exception:  # noqa: BLE001 - any failure to set up CUDA means "not usable"
            return False
        return True
