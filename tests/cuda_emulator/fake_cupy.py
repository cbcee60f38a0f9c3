"""NumPy standing in for CuPy, and a column-major cuBLAS on NumPy, for running `CuBLASBackend` on the CPU.

`fake_cupy()` gives a namespace with the parts of CuPy the backend uses: `HostArray` (a NumPy
array with CuPy's `.data.ptr`) as `ndarray`; `empty` and `empty_like` fill with 0xff bytes (NaN
as float), so an element a kernel never writes shows up; `RawModule(code=...)` compiles the code
with g++ against the emulator header and its `get_function` returns an `EmulatedKernel`;
streams (`cuda.Stream`, `get_current_stream`) and `memcpyAsync` on a stream; one device,
`DEVICE`, whose compute capability and name a test may change.

`FakeCublas` does sgemm, sgemmStridedBatched and sgeam on the buffers the backend points it at,
reading them column-major as cuBLAS does, and checks that every call's handle is bound
(`setStream`) to the stream that is current at the call. Its gemmEx and gemmStridedBatchedEx
take bfloat16 inputs (uint16 bits), a float32 output and float32 accumulation alone, and model
them as the bf16 products' definition: the inputs' exact float32 values multiplied as sgemm's.
"""

from __future__ import annotations

import ctypes
import itertools
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from cuda_emulator.build import build
from cuda_emulator.launch import EmulatedKernel
from cuda_emulator.signatures import kernel_parameters

_libraries: dict[Path, ctypes.CDLL] = {}  # loaded once per process


class HostArray(np.ndarray):
    """A NumPy array with CuPy's `.data.ptr` (and a `.data.mem.free`), so it can stand in for cupy.ndarray."""

    @property
    def data(self):
        # CuPy gives an empty array a bare Memory(0), which has no free()
        mem = SimpleNamespace(free=lambda: None) if self.size else SimpleNamespace()
        return SimpleNamespace(ptr=self.ctypes.data, mem=mem)


def _owned(array) -> HostArray:
    """A new HostArray that owns its memory (base None, as a new CuPy array), holding array's values."""
    array = np.asarray(array)
    out = np.ndarray.__new__(HostArray, array.shape, array.dtype)
    out[...] = array
    return out


def _host(make):
    return lambda *args, **kwargs: _owned(make(*args, **kwargs))


def _empty(shape, dtype=np.float32) -> HostArray:
    """Uninitialised, as CuPy's: every byte 0xff, a NaN to float reads."""
    out = np.ndarray.__new__(HostArray, shape, dtype)
    out.view(np.uint8)[...] = 0xFF
    return out


def _ascontiguousarray(a, dtype=None):
    """CuPy's: the array itself when it is already C-contiguous and of the dtype, else a new one."""
    if isinstance(a, HostArray) and a.flags.c_contiguous and (dtype is None or a.dtype == dtype):
        return a
    return _owned(np.ascontiguousarray(a, dtype=dtype))


class RawModule:
    """cupy.RawModule(code=...): the code compiled for the CPU; get_function gives an EmulatedKernel."""

    def __init__(self, code: str):
        library = build(code, "kernel.cu")
        if library not in _libraries:
            _libraries[library] = ctypes.CDLL(str(library))
        self._library, self._params = _libraries[library], kernel_parameters(code)

    def get_function(self, name: str) -> EmulatedKernel:
        return EmulatedKernel(self._library, name, self._params[name])


class Stream:
    """cupy.cuda.Stream: `with Stream():` makes it current; ptr is a distinct fake handle."""

    _handles = itertools.count(1)

    def __init__(self, non_blocking: bool = False, null: bool = False):
        self.ptr = 0 if null else next(Stream._handles)
        self.synchronized = 0

    def __enter__(self):
        self._previous = _current[0]
        _current[0] = self
        return self

    def __exit__(self, *exc):
        _current[0] = self._previous

    def synchronize(self):
        self.synchronized += 1


_current = [Stream(null=True)]


def _memcpy_async(dst, src, size, kind, stream):
    assert stream == _current[0].ptr, f"copy on stream {stream} while stream {_current[0].ptr} is current"
    ctypes.memmove(dst, src, size)


DEVICE = {"compute_capability": "90", "name": b"Emulated GPU"}  # an H100's capability unless a test changes it


def fake_cupy() -> SimpleNamespace:
    return SimpleNamespace(
        ndarray=HostArray, empty=_empty, empty_like=lambda a: _empty(a.shape, a.dtype), zeros=_host(np.zeros),
        ascontiguousarray=_ascontiguousarray, stack=_host(np.stack), RawModule=RawModule,
        get_default_memory_pool=lambda: SimpleNamespace(free_all_blocks=lambda: None),
        cuda=SimpleNamespace(
            Stream=Stream, get_current_stream=lambda: _current[0],
            Device=lambda device=0: SimpleNamespace(compute_capability=DEVICE["compute_capability"]),
            runtime=SimpleNamespace(memcpyAsync=_memcpy_async, getDevice=lambda: 0, deviceSynchronize=lambda: None,
                                    getDeviceProperties=lambda device: {"name": DEVICE["name"]}),
        ),
    )  # fmt: skip


CUDA_R_32F, CUDA_R_16BF, CUBLAS_COMPUTE_32F = 0, 14, 68  # the only types the Ex calls model


def _column_major(ptr: int, rows: int, cols: int, ld: int, transposed: bool = False, c_type=ctypes.c_float):
    """The (rows, cols) matrix op(X) that cuBLAS reads at ptr: X column-major with leading dimension ld,
    of elements c_type (c_float; c_uint16 for bfloat16 bits)."""
    stored_rows, stored_cols = (cols, rows) if transposed else (rows, cols)
    assert ld >= max(1, stored_rows), f"leading dimension {ld} < {stored_rows} rows"
    elements = (c_type * (ld * (stored_cols - 1) + stored_rows)).from_address(ptr)
    flat = np.ctypeslib.as_array(elements)
    size = ctypes.sizeof(c_type)
    stored = np.lib.stride_tricks.as_strided(flat, (stored_rows, stored_cols), (size, size * ld))
    return stored.T if transposed else stored


def _widen(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bits as the float32 values they are (exact)."""
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def _scalar(ptr: int) -> float:
    return ctypes.c_float.from_address(ptr).value


class FakeCublas:
    """The cuBLAS calls the backend makes, on host memory; each checks its handle's stream binding."""

    def __init__(self):
        self.streams: dict[int, int] = {}  # handle -> the stream it is bound to (0: the legacy default)
        self.calls = 0

    def create(self) -> int:
        handle = len(self.streams) + 1
        self.streams[handle] = 0
        return handle

    def destroy(self, handle: int) -> None:
        del self.streams[handle]

    def setStream(self, handle: int, stream: int) -> None:  # cuBLAS's names
        self.streams[handle] = stream

    def _check(self, handle: int) -> None:
        self.calls += 1
        current = _current[0].ptr
        assert self.streams[handle] == current, (
            f"cuBLAS handle on stream {self.streams[handle]}, current is {current}"
        )

    def sgemm(self, handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
        self._check(handle)
        op_a, op_b = _column_major(a, m, k, lda, transa == 1), _column_major(b, k, n, ldb, transb == 1)
        out = _column_major(c, m, n, ldc)
        product = _scalar(alpha) * (op_a.astype(np.float64) @ op_b)
        out[...] = product + _scalar(beta) * out if _scalar(beta) else product

    def sgemmStridedBatched(self, h, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, batch):
        for i in range(batch):  # strides count floats: 4 bytes each
            self.sgemm(
                h, ta, tb, m, n, k, alpha, a + 4 * i * sa, lda, b + 4 * i * sb, ldb, beta, c + 4 * i * sc, ldc
            )

    def gemmEx(self, h, ta, tb, m, n, k, alpha, a, a_type, lda, b, b_type, ldb, beta, c, c_type, ldc, compute, algo):
        self._check(h)
        types = (a_type, b_type, c_type, compute)
        assert types == (CUDA_R_16BF, CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F), f"unmodelled types {types}"
        op_a = _widen(_column_major(a, m, k, lda, ta == 1, ctypes.c_uint16))
        op_b = _widen(_column_major(b, k, n, ldb, tb == 1, ctypes.c_uint16))
        out = _column_major(c, m, n, ldc)
        product = _scalar(alpha) * (op_a.astype(np.float64) @ op_b)
        out[...] = product + _scalar(beta) * out if _scalar(beta) else product

    def gemmStridedBatchedEx(self, h, ta, tb, m, n, k, alpha, a, a_type, lda, sa, b, b_type, ldb, sb, beta,
                             c, c_type, ldc, sc, batch, compute, algo):
        for i in range(batch):  # strides count elements: 2 bytes each for the bf16 inputs, 4 for the output
            self.gemmEx(h, ta, tb, m, n, k, alpha, a + 2 * i * sa, a_type, lda, b + 2 * i * sb, b_type, ldb, beta,
                        c + 4 * i * sc, c_type, ldc, compute, algo)

    def sgeam(self, handle, transa, transb, m, n, alpha, a, lda, beta, b, ldb, c, ldc):
        self._check(handle)
        assert _scalar(beta) == 0, "the backend only transposes"
        _column_major(c, m, n, ldc)[...] = _scalar(alpha) * _column_major(a, m, n, lda, transa == 1)
