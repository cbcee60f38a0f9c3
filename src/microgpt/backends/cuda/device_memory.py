"""The reference API's device extras: raw device memory (`gpu_alloc`, `gpu_free`, `gpu_upload`,
`gpu_download`), the cuBLAS handle, and the backend's `sync` and `finalize`.

`DeviceMemory` is the mixin `CuBLASBackend` takes these from. It keeps the
pointers `gpu_alloc` handed out, so `gpu_free` refuses a foreign one and
`finalize` frees whatever is left, with the handle and CuPy's pooled memory.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from microgpt.backends.base import DeviceToHost, HostToDevice


class DeviceMemory:
    """Needs `_cp`, `_cublas`, `_handle`, `_raw_allocations`, `_kernels` and `_copy` (from `CuBLASBackend`)."""

    def gpu_alloc(self, size):
        if size < 0:
            raise ValueError(f"gpu_alloc: size must be 0 or more bytes, got {size}")
        ptr = self._cp.cuda.runtime.malloc(size)
        self._raw_allocations.add(ptr)
        return ptr

    def gpu_free(self, ptr):
        if ptr not in self._raw_allocations:
            raise ValueError(
                f"gpu_free: {ptr:#x} did not come from this backend's gpu_alloc, or was freed already"
            )
        self._raw_allocations.remove(ptr)
        self._cp.cuda.runtime.free(ptr)

    def gpu_upload(self, dst, src, size):
        self._copy(dst, _host_pointer(src, size, "gpu_upload"), size, HostToDevice)

    def gpu_download(self, dst, src, size):
        self._copy(_host_pointer(dst, size, "gpu_download", writable=True), src, size, DeviceToHost)

    def sync(self):
        self._cp.cuda.runtime.deviceSynchronize()

    @property
    def handle(self):
        if self._handle is None:
            raise RuntimeError("the cuda backend was finalized; make a new one to keep computing")
        return self._handle

    def finalize(self):
        if self._handle is None:
            return
        self.sync()
        for ptr in self._raw_allocations:
            self._cp.cuda.runtime.free(ptr)
        self._raw_allocations.clear()
        self._cublas.destroy(self._handle)
        self._handle = None
        self._kernels.clear()
        self._cp.get_default_memory_pool().free_all_blocks()


def _host_pointer(buffer: Any, size: int, op: str, writable: bool = False) -> int:
    """The address of a host buffer (a NumPy array of at least `size` bytes, or a raw address)."""
    if isinstance(buffer, (int, np.integer)):
        return int(buffer)
    if not isinstance(buffer, np.ndarray):
        raise TypeError(
            f"{op}: the host side must be a NumPy array or an address (int), got {type(buffer).__name__}"
        )
    if not buffer.flags.c_contiguous or buffer.nbytes < size or (writable and not buffer.flags.writeable):
        raise ValueError(
            f"{op}: the host array must be C-contiguous{', writable' if writable else ''} and hold at least "
            f"{size} bytes; it has {buffer.nbytes}"
        )
    return buffer.ctypes.data
