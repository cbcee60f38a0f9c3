"""One thread, the training step's own GEMM shapes: NumPy's BLAS (OpenBLAS) against MKL's cblas_sgemm.

Which BLAS pays is a per-machine question (issue 30: numpy's OpenBLAS or MKL
from the `mkl` wheel through its C interface). This times, in one thread, the
products one slice of a training step makes at bench_cpu.py's reference shape
(B=8 per slice: 1024 rows) and d128 shape (B=6: 384 rows): the projections,
the feed-forward and the head, their weight gradients (A^T B), and one of
attention's batched Q K^T products. NumPy's side is `np.matmul(a, b, out=c)`
(what the cpu backend calls); MKL's is `cblas_sgemm` through ctypes on the same
arrays (its call costs ~1 us more than a C caller's). Best of 7 rounds of 50
calls each, the two interleaved; the results are checked to agree (rtol 1e-4,
atol 1e-3: float32 sums of up to 1024 products in another order).

MKL comes from `--mkl-lib DIR` (the folder holding libmkl_rt.so.*), else the
`mkl` wheel's lib folder in this environment (`pip install mkl`); without it,
only NumPy's rates are printed. MKL runs sequential (MKL_THREADING_LAYER).

    python benchmarks/bench_blas.py [--mkl-lib DIR]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112
ROUNDS, CALLS = 7, 50


def step_products(rows: int, d: int, d_ff: int, seq_len: int, width: int) -> list[tuple[str, int, int, int, str]]:
    """(name, m, n, k, layout) of one slice's products: "nn" A B, "tn" A^T B (weight gradients), "nt" A B^T."""
    return [("x Wq (and k, v, o)", rows, d, d, "nn"), ("x W1", rows, d_ff, d, "nn"), ("h W2", rows, d, d_ff, "nn"),
            ("x W_head", rows, 65, d, "nn"), ("x^T dy (dWq ...)", d, d, rows, "tn"), ("x^T dh (dW1)", d, d_ff, rows, "tn"),
            ("h^T dy (dW2)", d_ff, d, rows, "tn"), ("Q K^T (one head)", seq_len, seq_len, width, "nt")]


SHAPES = {"reference slice B=8": (1024, 64, 256, 128, 16), "d128 slice B=6": (384, 128, 512, 64, 32)}


def load_mkl(folder: str | None):
    """MKL's cblas_sgemm from folder or the `mkl` wheel's lib folder, or None (with the reason) if absent."""
    os.environ["MKL_THREADING_LAYER"] = "SEQUENTIAL"
    folders = [Path(folder)] if folder else [Path(sys.prefix) / "lib"]
    for lib in folders:
        found = sorted(lib.glob("libmkl_rt.so*"))
        if found:
            mkl = ctypes.CDLL(str(found[0]), mode=ctypes.RTLD_GLOBAL)  # it loads its siblings from its folder
            sgemm = mkl.cblas_sgemm
            sgemm.restype = None
            sgemm.argtypes = [ctypes.c_int] * 6 + [ctypes.c_float, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                                   ctypes.c_int, ctypes.c_float, ctypes.c_void_p, ctypes.c_int]
            return sgemm, str(found[0])
    return None, f"no libmkl_rt.so* in {', '.join(map(str, folders))} (pip install mkl, or --mkl-lib DIR)"


def operands(m: int, n: int, k: int, layout: str):
    """a, b as stored, the NumPy call on them, and cblas_sgemm's (trans_a, trans_b, lda, ldb)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((k, m) if layout == "tn" else (m, k), dtype=np.float32)
    b = rng.standard_normal((n, k) if layout == "nt" else (k, n), dtype=np.float32)
    left = a.T if layout == "tn" else a  # (m, k)
    right = b.T if layout == "nt" else b  # (k, n)
    flags = (TRANS if layout == "tn" else NO_TRANS, TRANS if layout == "nt" else NO_TRANS,
             m if layout == "tn" else k, k if layout == "nt" else n)
    return a, b, left, right, flags


def best_seconds(call) -> float:
    best = float("inf")
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(CALLS):
            call()
        best = min(best, (time.perf_counter() - start) / CALLS)
    return best


def time_product(sgemm, name: str, m: int, n: int, k: int, layout: str) -> dict[str, float]:
    """Best seconds per call of the product through NumPy and, where sgemm is given, MKL (checked to agree)."""
    a, b, left, right, (trans_a, trans_b, lda, ldb) = operands(m, n, k, layout)
    ours, theirs = np.empty((m, n), np.float32), np.empty((m, n), np.float32)  # (m, n) each
    times = {"numpy": best_seconds(lambda: np.matmul(left, right, out=ours))}
    if sgemm is not None:
        times["mkl"] = best_seconds(lambda: sgemm(ROW_MAJOR, trans_a, trans_b, m, n, k, 1.0, a.ctypes.data, lda,
                                                  b.ctypes.data, ldb, 0.0, theirs.ctypes.data, n))
        if not np.allclose(ours, theirs, rtol=1e-4, atol=1e-3):
            raise SystemExit(f"{name}: MKL and NumPy disagree")
    return times


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mkl-lib", help="the folder holding libmkl_rt.so.* (default: this environment's lib)")
    args = parser.parse_args(argv)
    sgemm, where = load_mkl(args.mkl_lib)
    print(f"MKL: {where}")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; one thread; us per call and GFLOP/s")
    with threadpool_limits(1):
        for label, shape in SHAPES.items():
            print(label)
            for name, m, n, k, layout in step_products(*shape):
                times = time_product(sgemm, name, m, n, k, layout)
                flops = 2 * m * n * k
                figures = "  ".join(f"{who} {1e6 * s:7.1f} us {flops / s / 1e9:6.1f}" for who, s in times.items())
                ratio = f"  mkl/numpy time {times['mkl'] / times['numpy']:.2f}" if "mkl" in times else ""
                print(f"  {name:20s} {m:5d} x {n:4d} x {k:5d}  {figures}{ratio}")


if __name__ == "__main__":
    main()
