"""MKL's matrix products on the CPU through its C interface, called with ctypes: bf16 (`cblas_gemm_bf16bf16f32`)
and, where the machine's choice is MKL (backends/blas.py), float32 (`cblas_sgemm`).

MKL comes from the `mkl` wheel (the optional extra `mkl`: `pip install -e
".[mkl]"`), found through the installed distribution's file list; nothing of
MKL is copied here. `cblas_gemm_bf16bf16f32` multiplies bfloat16 matrices and
accumulates in float32, and runs on the matrix units where the processor has
them (AMX-BF16, AVX512-BF16). Its inputs are rounded here by the specification,
`bf16.bf16_bits`, so a product equals the float32 product of the rounded inputs
(the numpy backend's bf16 product) up to the order of the float32 additions.

`unavailable()` says in one line why bf16 products cannot run here (no MKL, or
a processor with neither feature), or None. MKL runs sequentially (one thread
per call): the cpu backend runs one stream per core, each calling it. MKL is
held to its conditional numerical reproducibility (`MKL_CBWR_Set`, AUTO and
STRICT): a product gives the same bits run after run on one machine, whatever
the alignment of its arrays.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.metadata
from pathlib import Path

import numpy as np

from microgpt.backends.bf16 import bf16_bits
from microgpt.core.version import install_hint

BF16_FLAGS = ("amx_bf16", "avx512_bf16")  # /proc/cpuinfo's names of the processor features MKL's bf16 kernels use
ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112  # CBLAS_LAYOUT, CBLAS_TRANSPOSE
THREADING_SEQUENTIAL = 1  # MKL_THREADING_LAYER: MKL runs in the calling thread
CBWR_AUTO_STRICT = 2 | 0x10000  # MKL_CBWR_AUTO | MKL_CBWR_STRICT: the same bits whatever the arrays' alignment


def mkl_library_path() -> Path | None:
    """libmkl_rt of the installed `mkl` distribution, or None where it is not installed."""
    try:
        files = importlib.metadata.files("mkl") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for name in files:
        if Path(name).name.startswith("libmkl_rt.so") or Path(name).name in ("mkl_rt.2.dll", "libmkl_rt.dylib"):
            path = Path(name.locate()).resolve()
            if path.exists():
                return path
    return None


def cpu_flags() -> set[str]:
    """The processor's feature flags as /proc/cpuinfo names them (empty where there is no /proc/cpuinfo)."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return set()


def unavailable(flags: set[str] | None = None, library: Path | None | bool = True) -> str | None:
    """Why bf16 products cannot run on this machine's CPU, in one line with the fix; None when they can.
    `flags` and `library` default to this machine's (tests pass others)."""
    flags = cpu_flags() if flags is None else flags
    library = mkl_library_path() if library is True else library
    if not flags & set(BF16_FLAGS):
        return ("--precision bf16 on the cpu backend needs a processor with AMX-BF16 or AVX512-BF16 (cpuinfo flags "
                "amx_bf16, avx512_bf16), and this one has neither; train at --precision fp32, or at bf16 with "
                "--backend numpy (the slow reference)")
    if library is None:
        return f"--precision bf16 on the cpu backend computes its products with MKL, which is not installed; " \
               f"{install_hint('mkl')}"
    return None


@functools.cache
def _library():
    """libmkl_rt, set to run in the calling thread and to reproduce its results; loaded once."""
    path = mkl_library_path()
    if path is None:
        raise RuntimeError(unavailable(library=None))
    lib = ctypes.CDLL(str(path))
    lib.MKL_Set_Threading_Layer.argtypes = [ctypes.c_int]
    lib.MKL_Set_Threading_Layer(THREADING_SEQUENTIAL)  # first: after any other call MKL keeps its threads
    lib.MKL_CBWR_Set.argtypes = [ctypes.c_int]
    lib.MKL_CBWR_Set(CBWR_AUTO_STRICT)  # before any computing call, as MKL requires
    return lib


@functools.cache
def _routine(name: str):
    """MKL's cblas_gemm_bf16bf16f32 or cblas_sgemm, its arguments declared (the two take the same)."""
    gemm = getattr(_library(), name)
    whole, pointer, real = ctypes.c_int, ctypes.c_void_p, ctypes.c_float  # MKL_INT is 32 bits (LP64)
    gemm.argtypes = [whole, whole, whole, whole, whole, whole, real, pointer, whole, pointer, whole, real, pointer,
                     whole]
    gemm.restype = None
    return gemm


def _layout(x: np.ndarray) -> tuple[int, int] | None:
    """(CBLAS transpose, leading dimension) reading the 2-D slices x[..., :, :] as they lie, or None when
    neither of their axes is unit-stride."""
    size = x.itemsize
    if x.strides[-1] == size or x.shape[-1] == 1:
        return NO_TRANS, max(1, x.strides[-2] // size if x.shape[-2] > 1 else x.shape[-1])
    if x.strides[-2] == size or x.shape[-2] == 1:
        return TRANS, max(1, x.strides[-1] // size if x.shape[-1] > 1 else x.shape[-2])
    return None


def gemm_bits(a_bits: np.ndarray, b_bits: np.ndarray, out: np.ndarray, accumulate: bool = False) -> None:
    """out (m, n) or (batch, m, n) = a @ b (or += with accumulate) for bf16 bits a (..., m, k) and b (..., k, n)
    in any layout where each 2-D slice has a unit-stride axis (others are copied first); out float32 with
    unit-stride rows. Products accumulate in float32."""
    _call(_routine("cblas_gemm_bf16bf16f32"), a_bits, b_bits, out, accumulate)


def sgemm(a: np.ndarray, b: np.ndarray, out: np.ndarray, accumulate: bool = False) -> None:
    """gemm_bits for float32 a and b: MKL's float32 product (cblas_sgemm), in the same layouts."""
    _call(_routine("cblas_sgemm"), a, b, out, accumulate)


def _call(gemm, a_in: np.ndarray, b_in: np.ndarray, out: np.ndarray, accumulate: bool) -> None:
    """gemm (one of _routine's) on a (..., m, k) and b (..., k, n) into out, slice by slice."""
    operands = []
    for bits in (a_in, b_in):
        layout = _layout(bits)
        if layout is None:
            bits = np.ascontiguousarray(bits)
            layout = _layout(bits)
        operands.append((bits, *layout))
    (a, trans_a, lda), (b, trans_b, ldb) = operands
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    if out.dtype != np.float32 or out.shape[-2:] != (m, n) or (n > 1 and out.strides[-1] != 4):
        raise ValueError(f"MKL product: out must be float32 ({m}, {n}) with unit-stride rows, got {out.dtype} "
                         f"{out.shape}")
    if m == 0 or n == 0:
        return
    ldc = max(1, out.strides[-2] // 4 if m > 1 else n)
    beta = 1.0 if accumulate else 0.0
    if a.ndim == 2:
        return gemm(ROW_MAJOR, trans_a, trans_b, m, n, k, 1.0, a.ctypes.data, lda, b.ctypes.data, ldb, beta,
                    out.ctypes.data, ldc)
    a_at, b_at, out_at = a.ctypes.data, b.ctypes.data, out.ctypes.data  # addresses, read once (each read costs)
    for i in range(a.shape[0]):
        gemm(ROW_MAJOR, trans_a, trans_b, m, n, k, 1.0, a_at + i * a.strides[0], lda, b_at + i * b.strides[0], ldb,
             beta, out_at + i * out.strides[0], ldc)


def bf16_matmul(a, b, transpose_a: bool = False, transpose_b: bool = False) -> np.ndarray:
    """New float32 op(a) @ op(b) for 2-D or 3-D (batched) float32 a and b, each input rounded to bf16 (nearest,
    ties to even) and the products accumulated in float32 by MKL."""
    a = np.swapaxes(a, -1, -2) if transpose_a else a
    b = np.swapaxes(b, -1, -2) if transpose_b else b
    if a.ndim != b.ndim or a.ndim not in (2, 3) or a.shape[-1] != b.shape[-2] or a.shape[:-2] != b.shape[:-2]:
        raise ValueError(f"bf16 product: shapes {a.shape} and {b.shape} do not chain")
    out = np.empty((*a.shape[:-1], b.shape[-1]), dtype=np.float32)
    gemm_bits(bf16_bits(a), bf16_bits(b), out)
    return out
