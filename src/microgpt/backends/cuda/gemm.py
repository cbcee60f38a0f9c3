"""The matrix products on cuBLAS: `matmul`, `matmul_into`, the strided-batched `bmm`, and `transpose`.

`CublasProducts` is the mixin `CuBLASBackend` multiplies with. Each call runs on
the backend's own cuBLAS handle, bound first to CuPy's current stream, where our
kernels and CuPy's own ops run. cuBLAS reads alpha and beta through host pointers
(its default pointer mode): the backend's `_one` and `_zero`.

At precision bf16 (the backend's `use_precision`) each product reads its two inputs'
bfloat16 bits (uint16; rounding.py: those the kernel that made an input wrote beside it,
else rounded now, the rounding of backends/bf16.py), and cuBLAS's GemmEx (strided-batched for
`bmm`) multiplies those with CUDA_R_16BF inputs, a CUDA_R_32F output and
CUBLAS_COMPUTE_32F accumulation: the numpy backend's float32 product of the rounded
inputs (numpy_backend.py), on the tensor cores. The output stays float32.
"""

from __future__ import annotations

CUBLAS_OP_N, CUBLAS_OP_T = 0, 1
CUDA_R_32F, CUDA_R_16BF = 0, 14  # cudaDataType_t
CUBLAS_COMPUTE_32F = 68  # cublasComputeType_t: float32 accumulation
CUBLAS_GEMM_DEFAULT = -1  # cublasGemmAlgo_t: cuBLAS's heuristic (tensor cores where the types allow)


class CublasProducts:
    """Needs `_cp`, `_cublas`, `dtype`, `handle`, `_one`, `_zero`, `precision`, `_mat` and `_bits`
    (from `CuBLASBackend`)."""

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
        if self.precision == "bf16":
            a, b = self._bits(a), self._bits(b)  # the Ex calls: sgemm's arguments, each buffer's type named
            bf16, f32 = CUDA_R_16BF, CUDA_R_32F
            if out.ndim == 2:
                self._cublas.gemmEx(
                    self.handle, op_b, op_a, n, m, k, alpha,
                    b.data.ptr, bf16, lda, a.data.ptr, bf16, ldb,
                    beta, out.data.ptr, f32, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT,
                )  # fmt: skip
            else:
                self._cublas.gemmStridedBatchedEx(
                    self.handle, op_b, op_a, n, m, k, alpha,
                    b.data.ptr, bf16, lda, b.shape[1] * b.shape[2],
                    a.data.ptr, bf16, ldb, a.shape[1] * a.shape[2],
                    beta, out.data.ptr, f32, n, m * n, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT,
                )  # fmt: skip
        elif out.ndim == 2:
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
        m, n = product_shape("matmul", a.shape, b.shape, transpose_a, transpose_b)
        out = self._cp.empty((m, n), dtype=self.dtype)
        self._gemm(a, b, out, transpose_a, transpose_b, accumulate=False)
        return out

    def matmul_into(self, a, b, dst, transpose_a=False, transpose_b=False, accumulate=False):
        a, b = self._mat(a, "matmul_into"), self._mat(b, "matmul_into")
        dst = self._mat(dst, "matmul_into", in_place=True)
        m, n = product_shape("matmul_into", a.shape, b.shape, transpose_a, transpose_b)
        if dst.shape != (m, n):
            raise ValueError(f"matmul_into: dst is {dst.shape} but the product is {(m, n)}")
        self._gemm(a, b, dst, transpose_a, transpose_b, accumulate)

    def bmm(self, a, b, transpose_a=False, transpose_b=False):
        if getattr(a, "ndim", None) != 3 or getattr(b, "ndim", None) != 3:
            shapes = getattr(a, "shape", type(a).__name__), getattr(b, "shape", type(b).__name__)
            raise ValueError(f"bmm: needs 3-D arrays, got shapes {shapes[0]} and {shapes[1]}")
        a, b = self._mat(a, "bmm", ndim=3), self._mat(b, "bmm", ndim=3)
        if a.shape[0] != b.shape[0]:
            raise ValueError(f"bmm: batch sizes differ ({a.shape[0]} and {b.shape[0]})")
        m, n = product_shape("bmm", a.shape[1:], b.shape[1:], transpose_a, transpose_b)
        out = self._cp.empty((a.shape[0], m, n), dtype=self.dtype)  # (batch, m, n)
        self._gemm(a, b, out, transpose_a, transpose_b, accumulate=False)
        return out

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


def product_shape(op: str, a_shape, b_shape, transpose_a: bool, transpose_b: bool) -> tuple[int, int]:
    """(m, n) of op(a) @ op(b) for 2-D shapes, or a ValueError saying why they do not chain."""
    a_shape = tuple(reversed(a_shape)) if transpose_a else tuple(a_shape)
    b_shape = tuple(reversed(b_shape)) if transpose_b else tuple(b_shape)
    if a_shape[1] != b_shape[0]:
        raise ValueError(f"{op}: shapes {a_shape} and {b_shape} do not chain (inner sizes differ)")
    return a_shape[0], b_shape[1]
