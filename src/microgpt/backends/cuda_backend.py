"""The CUDA backend: CuPy device arrays, cuBLAS for the matrix products, our own kernels for the rest.

`CuBLASBackend` keeps every Mat on the GPU as a float32 `cupy.ndarray`.
`matmul`, `matmul_into`, `bmm` (one strided-batched call) and `transpose` go
through cuBLAS on the backend's own handle; the row and element-wise ops are
the CUDA C kernels in `kernels/*.cu`, compiled with NVRTC by `cupy.RawModule`
on first use and kept for the life of the process (CuPy also caches the
binaries on disk). Element-wise `add`/`scale` are CuPy's own.

Every host<->device copy the backend makes goes through `_copy`, which counts
it in `transfers`, so a test can check that a training step uploads the token
ids once and downloads only the loss.

This module imports without CuPy: CuPy is imported when a backend is made (or
`is_usable` asks), and its absence is a `BackendUnavailable` with the fix.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from microgpt.backends.base import Backend, DeviceToHost, HostToDevice, Mat, ReferenceAPI
from microgpt.backends.constants import ADAM_BETA1, ADAM_BETA2, ADAM_EPS
from microgpt.backends.cuda_setup import _MODULES, _load_cupy, kernel_source

MAX_ROW_THREADS = 256  # threads per block for the one-block-per-row kernels
ELEMENT_THREADS = 256  # threads per block for the grid-stride element-wise kernels
MAX_ELEMENT_BLOCKS = 65535
COLUMN_TILE, ROW_LANES = 32, 8  # reduce_columns.cu's block shape
ROWS_PER_CHUNK = 128  # rows one column_sums block sums before its partial row is reduced again
MAX_GRID_Y = 65535  # CUDA's limit on gridDim.y (and z); gridDim.x may reach 2**31 - 1
CUBLAS_OP_N, CUBLAS_OP_T = 0, 1
FLASH_MAX_WIDTH = 128  # attention.cu's MAX_WIDTH: wider heads take the materialised path
FLASH_ROWS = 8  # attention.cu's ROWS_PER_BLOCK: one warp per row, blocks of (32, FLASH_ROWS) threads
ATTENTION_KINDS = ("flash", "materialised")

def _row_threads(cols: int) -> int:
    """Block size for a one-block-per-row kernel: whole warps, no more than the row needs, at most 256."""
    return min(MAX_ROW_THREADS, max(32, 32 * math.ceil(cols / 32)))


def _element_grid(n: int) -> tuple[int]:
    return (min(math.ceil(n / ELEMENT_THREADS), MAX_ELEMENT_BLOCKS),)


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


class CuBLASBackend(Backend, ReferenceAPI):
    """float32 on the current CuPy device. Raises BackendUnavailable when CuPy, a GPU or cuBLAS is missing."""

    name = "cuda"

    def __init__(self, attention: str = "flash"):
        """attention: "flash" (fused kernels, O(T) memory per head; the default) or "materialised"
        (the base class's path, which keeps the (T, T) probabilities of every head)."""
        if attention not in ATTENTION_KINDS:
            raise ValueError(f"attention must be one of {', '.join(ATTENTION_KINDS)}, got {attention!r}")
        self.attention = attention
        self._cp, self._cublas = _load_cupy()
        self.dtype = np.dtype(np.float32)
        self.device_id = self._cp.cuda.runtime.getDevice()
        self._handle = self._cublas.create()
        # cuBLAS reads alpha and beta through host pointers (its default pointer mode).
        self._one, self._zero = np.ones(1, np.float32), np.zeros(1, np.float32)
        self._raw_allocations: set[int] = set()  # pointers from gpu_alloc not yet freed
        self._kernels: dict[tuple[str, str], Any] = {}
        self.transfers = {"to_device": 0, "to_host": 0}

    @classmethod
    def is_usable(cls) -> bool:
        """True when CuPy imports, sees a GPU and loads cuBLAS; never raises."""
        try:
            _load_cupy()
        except Exception:  # noqa: BLE001 - any failure to set up CUDA means "not usable"
            return False
        return True

    # ---- kernels and checks ---------------------------------------------------------------

    def _kernel(self, file_name: str, kernel_name: str):
        key = (file_name, kernel_name)
        if key not in self._kernels:
            module_key = (file_name, self.device_id)
            if module_key not in _MODULES:
                _MODULES[module_key] = self._cp.RawModule(code=kernel_source(file_name))
            self._kernels[key] = _MODULES[module_key].get_function(kernel_name)
        return self._kernels[key]

    def _launch(self, file_name: str, kernel_name: str, grid: tuple, block: tuple, *args) -> None:
        if 0 in grid:
            return  # nothing to compute, and CUDA rejects an empty grid
        self._kernel(file_name, kernel_name)(grid, block, args)  # CuPy launches on its current stream

    def _per_row(self, file_name: str, kernel_name: str, shape: tuple[int, int], *args) -> None:
        """Launch a one-block-per-row kernel over a (rows, cols) array that has at least one column."""
        if shape[1] == 0:
            raise ValueError(f"{kernel_name}: the rows have no columns (shape {shape})")
        self._launch(file_name, kernel_name, (shape[0],), (_row_threads(shape[1]),), *args)

    def _per_element(self, file_name: str, kernel_name: str, n: int, *args) -> None:
        self._launch(file_name, kernel_name, _element_grid(n), (ELEMENT_THREADS,), *args)

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
        a.fill(0)

    def sum_rows(self, x):
        return self._column_sums(self._mat(x, "sum_rows"))

    def stack(self, mats: Sequence[Mat]) -> Mat:
        return self._cp.stack(list(mats))

    def bmm(self, a, b, transpose_a=False, transpose_b=False):
        if getattr(a, "ndim", None) != 3 or getattr(b, "ndim", None) != 3:
            shapes = getattr(a, "shape", type(a).__name__), getattr(b, "shape", type(b).__name__)
            raise ValueError(f"bmm: needs 3-D arrays, got shapes {shapes[0]} and {shapes[1]}")
        a, b = self._mat(a, "bmm", ndim=3), self._mat(b, "bmm", ndim=3)
        if a.shape[0] != b.shape[0]:
            raise ValueError(f"bmm: batch sizes differ ({a.shape[0]} and {b.shape[0]})")
        m, n = _product_shape("bmm", a.shape[1:], b.shape[1:], transpose_a, transpose_b)
        out = self._cp.empty((a.shape[0], m, n), dtype=self.dtype)  # (batch, m, n)
        self._gemm(a, b, out, transpose_a, transpose_b, accumulate=False)
        return out

    # ---- linear algebra (cuBLAS) ----------------------------------------------------------

    def _bind_stream(self) -> None:
        """Put the next cuBLAS call on CuPy's current stream, where our kernels and CuPy's own ops run,
        so it is ordered after the work that made its inputs (a handle otherwise stays on the legacy
        default stream, which does not wait for a non-blocking stream)."""
        self._cublas.setStream(self.handle, self._cp.cuda.get_current_stream().ptr)

    def _gemm(self, a, b, out, transpose_a: bool, transpose_b: bool, accumulate: bool) -> None:
        """out (=, or += with accumulate) op(a) @ op(b) for contiguous 2-D operands, or 3-D ones batched.

        cuBLAS is column-major, and a row-major (r, c) buffer reads there as its (c, r) transpose.
        So out = op(a) @ op(b) is computed as out^T = op(b)^T @ op(a)^T: b's buffer is cuBLAS's
        first operand, a's the second, and every leading dimension is a buffer's own row length.
        """
        m, n = out.shape[-2:]
        k = a.shape[-2] if transpose_a else a.shape[-1]
        batch = out.shape[0] if out.ndim == 3 else 1
        if batch == 0 or m == 0 or n == 0:
            return
        if k == 0:  # an empty sum: cuBLAS would only scale out by beta
            if not accumulate:
                out.fill(0)
            return
        self._bind_stream()
        op_a = CUBLAS_OP_T if transpose_a else CUBLAS_OP_N
        op_b = CUBLAS_OP_T if transpose_b else CUBLAS_OP_N
        alpha = self._one.ctypes.data
        beta = (self._one if accumulate else self._zero).ctypes.data
        lda, ldb = b.shape[-1], a.shape[-1]
        if out.ndim == 2:
            self._cublas.sgemm(
                self.handle, op_b, op_a, n, m, k,
                alpha, b.data.ptr, lda, a.data.ptr, ldb, beta, out.data.ptr, n,
            )  # fmt: skip
        else:
            self._cublas.sgemmStridedBatched(
                self.handle, op_b, op_a, n, m, k, alpha,
                b.data.ptr, lda, b.shape[1] * b.shape[2],
                a.data.ptr, ldb, a.shape[1] * a.shape[2],
                beta, out.data.ptr, n, m * n, batch,
            )  # fmt: skip

    def matmul(self, a, b, transpose_a=False, transpose_b=False):
        a, b = self._mat(a, "matmul"), self._mat(b, "matmul")
        m, n = _product_shape("matmul", a.shape, b.shape, transpose_a, transpose_b)
        out = self._cp.empty((m, n), dtype=self.dtype)
        self._gemm(a, b, out, transpose_a, transpose_b, accumulate=False)
        return out

    def matmul_into(self, a, b, dst, transpose_a=False, transpose_b=False, accumulate=False):
        a, b = self._mat(a, "matmul_into"), self._mat(b, "matmul_into")
        dst = self._mat(dst, "matmul_into", in_place=True)
        m, n = _product_shape("matmul_into", a.shape, b.shape, transpose_a, transpose_b)
        if dst.shape != (m, n):
            raise ValueError(f"matmul_into: dst is {dst.shape} but the product is {(m, n)}")
        self._gemm(a, b, dst, transpose_a, transpose_b, accumulate)

    def transpose(self, a):
        a = self._mat(a, "transpose")
        rows, cols = a.shape
        out = self._cp.empty((cols, rows), dtype=self.dtype)
        if a.size:
            self._bind_stream()
            # Column-major, a's buffer is (cols, rows); geam's op T on it gives (rows, cols) column-major,
            # which is out's (cols, rows) row-major buffer. beta is 0, so the B operand (out) is not read.
            self._cublas.sgeam(
                self.handle, CUBLAS_OP_T, CUBLAS_OP_N, rows, cols, self._one.ctypes.data, a.data.ptr, cols,
                self._zero.ctypes.data, out.data.ptr, rows, out.data.ptr, rows,
            )
        return out

    def add(self, a, b):
        return a + b

    def add_(self, a, b):
        a += b

    def scale(self, a, s):
        return a * np.float32(s)

    def scale_(self, a, s):
        a *= np.float32(s)

    def release(self, a):
        """Return a's memory to CuPy's pool now; a, and any view of it, must not be used afterwards."""
        if not isinstance(a, self._cp.ndarray):
            raise TypeError(f"release: expected a device array (cupy.ndarray), got {type(a).__name__}")
        if a.base is not None:
            raise ValueError(
                "release: this array is a view into another one; release the array that owns the memory"
            )
        free = getattr(a.data.mem, "free", None)  # an empty array's memory is a bare Memory(0): nothing to free
        if free is not None:
            free()

    # ---- element-wise and reductions (our kernels) ----------------------------------------

    def softmax_rows(self, x):
        return self._softmax("softmax_rows", x, 1.0, causal=False)

    def fused_attn_softmax(self, scores, scale):
        return self._softmax("fused_attn_softmax", scores, scale, causal=True)

    def _softmax(self, op: str, x, scale: float, causal: bool):
        x = self._mat(x, op)
        out = self._cp.empty_like(x)  # (rows, cols)
        rows, cols = x.shape
        self._per_row(
            "softmax.cu", "softmax_rows", x.shape, x, out, np.int32(rows), np.int32(cols), np.float32(scale),
            np.int32(causal),
        )
        return out

    def softmax_backward(self, s, ds):
        return self._softmax_backward("softmax_backward", s, ds, 1.0)

    def fused_attn_softmax_backward(self, s, ds, scale):
        return self._softmax_backward("fused_attn_softmax_backward", s, ds, scale)

    def _softmax_backward(self, op: str, s, ds, scale: float):
        s, ds = self._mat(s, op), self._mat(ds, op)
        self._same_shape(op, s, ds)
        out = self._cp.empty_like(s)  # (rows, cols)
        rows, cols = s.shape
        self._per_row(
            "softmax.cu", "softmax_backward", s.shape, s, ds, out, np.int32(rows), np.int32(cols),
            np.float32(scale),
        )
        return out

    def causal_mask(self, scores):
        self._causal_mask("causal_mask", scores, None)

    def causal_mask_batched(self, scores, seq_len):
        if seq_len < 1:
            raise ValueError(f"causal_mask_batched: seq_len must be at least 1, got {seq_len}")
        self._causal_mask("causal_mask_batched", scores, seq_len)

    def _causal_mask(self, op: str, scores, period: int | None) -> None:
        """Row i is position i % period; period None means one block (position = row)."""
        scores = self._mat(scores, op, in_place=True)
        self._per_element(
            "softmax.cu", "causal_mask", scores.size, scores, np.int64(scores.size),
            np.int32(scores.shape[1]), np.int32(scores.shape[0] if period is None else period),
        )

    def bias_add(self, data, bias):
        data = self._mat(data, "bias_add", in_place=True)
        bias = self._row_vector("bias_add", "bias", bias, data.shape[1])
        self._per_element(
            "elementwise.cu", "bias_add", data.size, data, bias, np.int64(data.size), np.int32(data.shape[1])
        )

    def relu_forward(self, x):
        x = self._mat(x, "relu_forward")
        out, mask = self._cp.empty_like(x), self._cp.empty_like(x)  # each (rows, cols)
        self._per_element("elementwise.cu", "relu_forward", x.size, x, out, mask, np.int64(x.size))
        return out, mask

    def relu_backward(self, grad, mask):
        grad, mask = self._mat(grad, "relu_backward"), self._mat(mask, "relu_backward")
        self._same_shape("relu_backward", grad, mask)
        out = self._cp.empty_like(grad)  # (rows, cols)
        self._per_element("elementwise.cu", "relu_backward", grad.size, grad, mask, out, np.int64(grad.size))
        return out

    def fused_bias_relu(self, x, bias):
        x = self._mat(x, "fused_bias_relu", in_place=True)
        bias = self._row_vector("fused_bias_relu", "bias", bias, x.shape[1])
        out, mask = self._cp.empty_like(x), self._cp.empty_like(x)  # each (rows, cols)
        self._per_element(
            "elementwise.cu", "bias_relu", x.size, x, bias, out, mask, np.int64(x.size), np.int32(x.shape[1])
        )
        return out, mask

    def layer_norm_forward(self, x, gamma, beta):
        x = self._mat(x, "layer_norm_forward")
        rows, cols = x.shape
        gamma = self._row_vector("layer_norm_forward", "gamma", gamma, cols)
        beta = self._row_vector("layer_norm_forward", "beta", beta, cols)
        out, norm = self._cp.empty_like(x), self._cp.empty_like(x)  # each (rows, cols)
        std_inv = self._cp.empty((rows, 1), dtype=self.dtype)
        self._per_row(
            "layer_norm.cu", "layer_norm_forward", x.shape, x, gamma, beta, out, norm, std_inv,
            np.int32(rows), np.int32(cols),
        )
        return out, norm, std_inv

    def layer_norm_backward(self, grad, norm, std_inv, gamma):
        op = "layer_norm_backward"
        grad, norm, std_inv = self._mat(grad, op), self._mat(norm, op), self._mat(std_inv, op)
        self._same_shape(op, grad, norm)
        rows, cols = grad.shape
        if std_inv.shape != (rows, 1):
            raise ValueError(f"{op}: std_inv must be ({rows}, 1), got {std_inv.shape}")
        gamma = self._row_vector(op, "gamma", gamma, cols)
        dx = self._cp.empty_like(grad)  # (rows, cols)
        self._per_row(
            "layer_norm.cu", "layer_norm_backward", grad.shape, grad, norm, std_inv, gamma, dx,
            np.int32(rows), np.int32(cols),
        )
        return dx, self._column_sums(grad, norm), self._column_sums(grad)

    def _column_sums(self, a, b=None):
        """New (1, cols): the column sums of a, or of a * b, over the rows (see reduce_columns.cu)."""
        rows, cols = a.shape
        if rows == 0:
            return self.zeros((1, cols))
        # the chunks are grid.y, which CUDA caps at 65535: past 65535 * 128 rows, each chunk takes more rows
        rows_per_chunk = max(ROWS_PER_CHUNK, math.ceil(rows / MAX_GRID_Y))
        chunks = math.ceil(rows / rows_per_chunk)
        partial = self._cp.empty((chunks, cols), dtype=self.dtype)  # one partial sum per chunk of rows
        grid, block = (math.ceil(cols / COLUMN_TILE), chunks), (COLUMN_TILE, ROW_LANES)
        sizes = (np.int32(rows), np.int32(cols), np.int32(rows_per_chunk))
        if b is None:
            self._launch("reduce_columns.cu", "column_sums", grid, block, a, partial, *sizes)
        else:
            self._launch("reduce_columns.cu", "column_product_sums", grid, block, a, b, partial, *sizes)
        return partial if chunks == 1 else self._column_sums(partial)

    def adam_step(self, param, grad, m, v, lr, t):
        if t < 1:
            raise ValueError(f"adam_step: t counts from 1, got {t}")
        param = self._mat(param, "adam_step", in_place=True)
        grad = self._mat(grad, "adam_step")
        m, v = self._mat(m, "adam_step", in_place=True), self._mat(v, "adam_step", in_place=True)
        for other in (grad, m, v):
            self._same_shape("adam_step", param, other)
        self._per_element(
            "elementwise.cu", "adam_step", param.size, param, grad, m, v, np.int64(param.size),
            np.float32(ADAM_BETA1), np.float32(1 - ADAM_BETA1),
            np.float32(ADAM_BETA2), np.float32(1 - ADAM_BETA2),
            np.float32(ADAM_EPS), np.float32(lr / (1 - ADAM_BETA1**t)), np.float32(1 - ADAM_BETA2**t),
        )

    def adamw_step(self, param, grad, m, v, decay_mask, lr, t, beta1, beta2, weight_decay, grad_scale):
        if t < 1:
            raise ValueError(f"adamw_step: t counts from 1, got {t}")
        param = self._mat(param, "adamw_step", in_place=True)
        grad, decay_mask = self._mat(grad, "adamw_step"), self._mat(decay_mask, "adamw_step")
        m, v = self._mat(m, "adamw_step", in_place=True), self._mat(v, "adamw_step", in_place=True)
        for other in (grad, m, v, decay_mask):
            self._same_shape("adamw_step", param, other)
        self._per_element(
            "elementwise.cu", "adamw_step", param.size, param, grad, m, v, decay_mask, np.int64(param.size),
            np.float32(grad_scale), np.float32(beta1), np.float32(1 - beta1), np.float32(beta2),
            np.float32(1 - beta2), np.float32(ADAM_EPS), np.float32(lr * weight_decay),
            np.float32(lr / (1 - beta1**t)), np.float32(1 - beta2**t),
        )

    def rope_apply(self, x, cos_cache, sin_cache):
        self._rope("rope_apply", x, cos_cache, sin_cache, 1.0)

    def rope_apply_inverse(self, x, cos_cache, sin_cache):
        self._rope("rope_apply_inverse", x, cos_cache, sin_cache, -1.0)

    def _rope(self, op: str, x, cos_cache, sin_cache, sign: float) -> None:
        x = self._mat(x, op, in_place=True)
        cos_cache, sin_cache = self._mat(cos_cache, op), self._mat(sin_cache, op)
        self._same_shape(op, cos_cache, sin_cache)
        rows, dim = x.shape
        cache_rows, cache_cols = cos_cache.shape
        if cache_rows == 0 or cache_cols < dim - dim % 2:
            raise ValueError(
                f"{op}: caches {cos_cache.shape} need at least one row and {dim} columns for x {x.shape}"
            )
        self._per_element(
            "rope.cu", "rope_rotate", rows * (dim // 2), x, cos_cache, sin_cache,
            np.int32(rows), np.int32(dim),
            np.int32(cache_rows), np.int32(cache_cols), np.float32(sign),
        )

    def fused_softmax_ce_grad(self, logits, targets):
        logits = self._mat(logits, "fused_softmax_ce_grad")
        rows, cols = logits.shape
        if rows == 0:
            raise ValueError("fused_softmax_ce_grad: no rows, so the mean loss is undefined")
        targets = self._device_ids(targets, "fused_softmax_ce_grad", rows)
        dlogits = self._cp.empty_like(logits)  # (rows, cols)
        row_losses = self._cp.empty(rows, dtype=self.dtype)  # (rows,)
        rows_done = self._cp.zeros(1, dtype=np.uint32)
        loss = self._cp.empty(1, dtype=self.dtype)
        self._per_row(
            "loss.cu", "softmax_ce_grad", logits.shape, logits, targets, dlogits, row_losses, rows_done, loss,
            np.int32(rows), np.int32(cols),
        )
        return float(self._download(loss)[0]), dlogits

    def embedding_gather(self, token_emb, ids, seq_len, d_model):
        token_emb = self._mat(token_emb, "embedding_gather")
        if d_model > token_emb.shape[1]:
            raise ValueError(f"embedding_gather: d_model {d_model} is wider than the table {token_emb.shape}")
        ids = self._device_ids(ids, "embedding_gather", seq_len)
        out = self._cp.empty((seq_len, d_model), dtype=self.dtype)
        self._per_element(
            "embedding.cu", "embedding_gather", seq_len * d_model, token_emb, ids, out, np.int32(seq_len),
            np.int32(d_model), np.int32(token_emb.shape[0]), np.int32(token_emb.shape[1]),
        )
        return out

    def embedding_scatter_add(self, grad, ids, d_token_emb, seq_len, d_model):
        op = "embedding_scatter_add"
        grad = self._mat(grad, op)
        d_token_emb = self._mat(d_token_emb, op, in_place=True)
        if grad.shape[0] < seq_len or grad.shape[1] < d_model or d_token_emb.shape[1] < d_model:
            raise ValueError(
                f"{op}: grad {grad.shape} and table {d_token_emb.shape} must cover "
                f"seq_len {seq_len} x d_model {d_model}"
            )
        ids = self._device_ids(ids, op, seq_len)
        self._per_element(  # one thread per table cell (see embedding.cu)
            "embedding.cu", "embedding_scatter_add", d_token_emb.shape[0] * d_model, grad, ids, d_token_emb,
            np.int32(seq_len),
            np.int32(d_model), np.int32(grad.shape[1]), np.int32(d_token_emb.shape[0]),
            np.int32(d_token_emb.shape[1]),
        )

    # ---- attention (attention.cu) ---------------------------------------------------------

    def causal_attention(self, q, k, v, scale):
        """Flash attention for Tq == Tk and widths up to FLASH_MAX_WIDTH; otherwise (one query against a
        cache, wider heads, or attention="materialised") the base class's materialised path."""
        op = "causal_attention"
        q, k, v = (self._mat(a, op, ndim=3) for a in (q, k, v))
        n, t, w = q.shape
        if self.attention == "materialised" or k.shape[1] != t or w > FLASH_MAX_WIDTH:
            out, saved = super().causal_attention(q, k, v, scale)
            return out, ("materialised", saved)
        for name, other in (("k", k), ("v", v)):
            if other.shape != q.shape:
                raise ValueError(f"{op}: q is {q.shape} but {name} is {other.shape}")
        out = self._cp.empty_like(q)  # (n, T, w)
        lse = self._cp.empty((n, t), dtype=self.dtype)  # each row's log-sum-exp, for the backward
        self._launch(
            "attention.cu", "flash_forward", self._flash_grid(op, n, t), (32, FLASH_ROWS), q, k, v, out, lse,
            np.int32(t), np.int32(w), np.float32(scale),
        )
        return out, ("flash", (q, k, v, out, lse))

    def causal_attention_backward(self, dout, saved, scale):
        kind, saved = saved
        if kind == "materialised":
            return super().causal_attention_backward(dout, saved, scale)
        op = "causal_attention_backward"
        q, k, v, out, lse = saved
        dout = self._mat(dout, op, ndim=3)
        self._same_shape(op, dout, q)
        n, t, w = q.shape
        delta = self._cp.empty((n, t), dtype=self.dtype)  # rowsum(dout * out)
        self._launch(
            "attention.cu", "attention_row_dots", (math.ceil(n * t / FLASH_ROWS),), (32, FLASH_ROWS), dout, out,
            delta, np.int64(n * t), np.int32(w),
        )
        dq, dk, dv = self._cp.empty_like(q), self._cp.empty_like(q), self._cp.empty_like(q)  # each (n, T, w)
        grid, block, sizes = self._flash_grid(op, n, t), (32, FLASH_ROWS), (np.int32(t), np.int32(w), np.float32(scale))
        self._launch("attention.cu", "flash_backward_dq", grid, block, q, k, v, dout, lse, delta, dq, *sizes)
        self._launch("attention.cu", "flash_backward_dkv", grid, block, q, k, v, dout, lse, delta, dk, dv, *sizes)
        return dq, dk, dv

    def _flash_grid(self, op: str, n: int, t: int) -> tuple[int, int]:
        """(heads, row blocks): grid.y is capped at 65535 blocks of FLASH_ROWS rows."""
        blocks = math.ceil(t / FLASH_ROWS)
        if blocks > MAX_GRID_Y:
            raise ValueError(f"{op}: T = {t} is more than {MAX_GRID_Y * FLASH_ROWS} positions")
        return n, blocks

    # ---- device memory --------------------------------------------------------------------

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


def _product_shape(op: str, a_shape, b_shape, transpose_a: bool, transpose_b: bool) -> tuple[int, int]:
    """(m, n) of op(a) @ op(b) for 2-D shapes, or a ValueError saying why they do not chain."""
    a_shape = tuple(reversed(a_shape)) if transpose_a else tuple(a_shape)
    b_shape = tuple(reversed(b_shape)) if transpose_b else tuple(b_shape)
    if a_shape[1] != b_shape[0]:
        raise ValueError(f"{op}: shapes {a_shape} and {b_shape} do not chain (inner sizes differ)")
    return a_shape[0], b_shape[1]
