"""Where a cpu-backend step's time goes: the seconds and FLOPs of its matrix products, clocked as they run.

`ProductClock` replaces `CpuBackend._product` (every product of the cpu backend:
the linear layers' and attention's, forward and backward) and MKL's call
(`mkl_bf16._call`, the ctypes loop over a product's slices) with wrappers that
add up, over every thread, the seconds spent in them and the FLOPs they did
(2 k per entry of each product's result: the products as run, so attention's
skipped future-key halves are not counted). At bf16 a product's seconds less
MKL's are the rounding of its inputs to bf16 in NumPy (and the copies of
inputs MKL cannot read as they lie). A few microseconds a call are the price;
the benchmark that uses it times its tokens/s in runs without it.

    with ProductClock() as clock:
        ...train...
    clock.product_seconds, clock.library_seconds, clock.flops
"""

from __future__ import annotations

import threading
import time

from microgpt.backends import mkl_bf16
from microgpt.backends.cpu_backend import CpuBackend


class ProductClock:
    def __init__(self):
        self.product_seconds = self.library_seconds = self.flops = 0.0
        self._lock = threading.Lock()
        self._inside = threading.local()  # a product that calls itself (an out MKL cannot write) counts once

    def __enter__(self):
        self._product, self._call = CpuBackend._product, mkl_bf16._call
        product, call, clock = self._product, self._call, self

        def timed_product(backend, a, b, *args, **kwargs):
            if getattr(clock._inside, "depth", 0):
                return product(backend, a, b, *args, **kwargs)
            clock._inside.depth = 1
            start = time.perf_counter()
            try:
                out = product(backend, a, b, *args, **kwargs)
            finally:
                clock._inside.depth = 0
            clock._add(time.perf_counter() - start, 0.0, 2.0 * a.shape[-1] * out.size)
            return out

        def timed_call(*args):
            start = time.perf_counter()
            call(*args)
            clock._add(0.0, time.perf_counter() - start, 0.0)

        CpuBackend._product, mkl_bf16._call = timed_product, timed_call
        return self

    def __exit__(self, *exc):
        CpuBackend._product, mkl_bf16._call = self._product, self._call
        return False

    def _add(self, product_seconds: float, library_seconds: float, flops: float) -> None:
        with self._lock:
            self.product_seconds += product_seconds
            self.library_seconds += library_seconds
            self.flops += flops
