"""The CUDA backend (CuPy, cuBLAS, our .cu kernels), one idea per file; `CuBLASBackend` puts them together.

- backend.py: `CuBLASBackend`, its state and `is_usable`;
- loader.py: finding CuPy and cuBLAS, and the kernel sources NVRTC compiles (`kernels/*.cu`);
- kernel_launch.py: compiling a kernel once, and the grid and block shapes of row and element-wise launches;
- arrays.py: device arrays, the checks on an op's arguments, every host<->device copy, the plumbing ops;
- gemm.py: the products on cuBLAS (matmul, matmul_into, bmm, transpose);
- softmax.py, layer_norm.py, elementwise.py, embedding.py, adam.py: the ops on our kernels;
- attention.py: flash attention, or the materialised path;
- device_memory.py: the reference API's raw device memory and cuBLAS handle, `sync` and `finalize`.
"""

from __future__ import annotations

from microgpt.backends.cuda.backend import CuBLASBackend

__all__ = ["CuBLASBackend"]
