"""`blas_threads()`: the thread counts of the BLAS pools loaded in this process (threadpoolctl), which
--threads sets with numba's (the tests of a backend's start and of a batch split over threads). MKL loaded for
bf16 products (backends/mkl_bf16.py) runs sequentially, one thread per caller, by design: it is left out."""

from __future__ import annotations

from threadpoolctl import threadpool_info


def blas_threads() -> set[int]:
    return {pool["num_threads"] for pool in threadpool_info()
            if pool["user_api"] == "blas" and pool.get("threading_layer") != "sequential"}
