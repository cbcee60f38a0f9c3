"""Device arrays: checking what an op is handed, every host<->device copy, and the plumbing ops.

`DeviceArrays` is the mixin `CuBLASBackend` keeps its arrays with: float32
`cupy.ndarray`s on the current device. `_mat` and its siblings turn an op's
arguments into contiguous device arrays of the right shape or say what is wrong.
Every host<->device copy goes through `_copy`, which counts it in `transfers`, so
a test can check that a training step uploads the token ids once and downloads
only the loss. Element-wise `add`/`scale`, `zeros` and `stack` are CuPy's own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from microgpt.backends.base import DeviceToHost, HostToDevice, Mat


class DeviceArrays:
    """Needs `_cp` (CuPy), `dtype`, a `transfers` dict and `_rounded` (whose bits an op that writes an array in
    place forgets), which `CuBLASBackend.__init__` sets."""

    # ---- checks ----------------------------------------------------------------------------

    def _mat(self, a: Any, op: str, ndim: int = 2, in_place: bool = False):
        """a as a C-contiguous float32 device array of `ndim` dimensions, or a clear error."""
        if not isinstance(a, self._cp.ndarray):
            raise TypeError(
                f"{op}: expected a device array (cupy.ndarray), got {type(a).__name__}; "
                "copy host data to the device with backend.from_host"
            )
        if a.dtype != np.float32:
            raise TypeError(f"{op}: the cuda backend works in float32, got an array of {a.dtype}")
        if a.ndim != ndim:
            raise ValueError(f"{op}: needs {ndim}-D arrays, got shape {a.shape}")
        if in_place:
            self._rounded.forget(a)  # its bfloat16 bits, if a kernel kept them, would no longer be its values'
        if a.flags.c_contiguous:
            return a
        if in_place:
            raise ValueError(
                f"{op}: the array updated in place must be C-contiguous (got strides {a.strides})"
            )
        return self._cp.ascontiguousarray(a)

    def _same_shape(self, op: str, a, b) -> None:
        if a.shape != b.shape:
            raise ValueError(f"{op}: shapes {a.shape} and {b.shape} differ")

    def _row_vector(self, op: str, what: str, v, cols: int):
        """v, which must hold `cols` values ((1, cols) or (cols,)), as a contiguous device array."""
        if not isinstance(v, self._cp.ndarray) or v.size != cols:
            shape = getattr(v, "shape", type(v).__name__)
            raise ValueError(f"{op}: {what} must be (1, {cols}) to match the data's columns, got {shape}")
        return self._mat(v.reshape(1, cols), op)

    def _device_ids(self, ids: Any, op: str, count: int):
        """ids as a flat int32 device array of at least `count` entries (host ids are uploaded)."""
        ids = self.ids(ids).reshape(-1)
        if ids.size < count:
            raise ValueError(f"{op}: needs {count} ids, got {ids.size}")
        return ids

    # ---- transfers: every host<->device copy goes through _copy ----------------------------

    def _copy(self, dst: int, src: int, size: int, kind: int) -> None:
        """Copy `size` bytes between host and device (kind HostToDevice or DeviceToHost) and count it.

        The copy is queued on CuPy's current stream, after the work already queued there, and waited
        for. (A plain cudaMemcpy runs on the legacy default stream, which does not wait for a
        non-blocking stream's kernels: a download could read a result before it is written.)
        """
        if kind not in (HostToDevice, DeviceToHost):
            raise ValueError(f"copy kind {kind} is neither HostToDevice ({HostToDevice}) nor DeviceToHost")
        stream = self._cp.cuda.get_current_stream()
        self._cp.cuda.runtime.memcpyAsync(dst, src, size, kind, stream.ptr)
        stream.synchronize()
        self.transfers["to_device" if kind == HostToDevice else "to_host"] += 1

    def _upload(self, host: np.ndarray):
        """A new device array holding a copy of a C-contiguous host array."""
        device = self._cp.empty(host.shape, dtype=host.dtype)
        if host.nbytes:
            self._copy(device.data.ptr, host.ctypes.data, host.nbytes, HostToDevice)
        return device

    def _download(self, device) -> np.ndarray:
        device = self._cp.ascontiguousarray(device)
        host = np.empty(device.shape, dtype=device.dtype)
        if host.nbytes:
            self._copy(host.ctypes.data, device.data.ptr, host.nbytes, DeviceToHost)
        return host

    # ---- plumbing -------------------------------------------------------------------------

    def zeros(self, shape):
        return self._cp.zeros(shape, dtype=self.dtype)

    def from_host(self, array):
        return self._upload(np.ascontiguousarray(array, dtype=self.dtype))

    def to_host(self, a):
        return self._download(a)

    def ids(self, token_ids):
        if isinstance(token_ids, self._cp.ndarray):  # already on the device: no transfer
            return self._cp.ascontiguousarray(token_ids, dtype=np.int32)
        return self._upload(np.ascontiguousarray(token_ids, dtype=np.int32))

    def zero_(self, a):
        self._rounded.forget(a)
        a.fill(0)

    def stack(self, mats: Sequence[Mat]) -> Mat:
        return self._cp.stack(list(mats))

    def add(self, a, b):
        return a + b

    def add_(self, a, b):
        self._rounded.forget(a)
        a += b

    def scale(self, a, s):
        return a * np.float32(s)

    def scale_(self, a, s):
        self._rounded.forget(a)
        a *= np.float32(s)

    def release(self, a):
        """Return a's memory to CuPy's pool now; a, and any view of it, must not be used afterwards."""
        if not isinstance(a, self._cp.ndarray):
            raise TypeError(f"release: expected a device array (cupy.ndarray), got {type(a).__name__}")
        if a.base is not None:
            raise ValueError(
                "release: this array is a view into another one; release the array that owns the memory"
            )
        self._rounded.forget(a)
        free = getattr(a.data.mem, "free", None)  # an empty array's memory is a bare Memory(0): nothing to free
        if free is not None:
            free()
