"""One thread knob for CPU work: `set_threads(n)` sets the BLAS pool and numba's pool together.

NumPy's dense products run on its BLAS (OpenBLAS, MKL, ...); both pools default
to every core. The BLAS pool is limited through threadpoolctl (for the whole
process); numba's count is set for the calling thread. The cpu backend's own
kernels each run in one thread, and it uses the same count for the slices of a
batch it runs at once (backends/cpu_streams.py), switching BLAS to one thread
per slice meanwhile (`blas_thread_setter`). Without numba only the BLAS pool is
set. An invalid count raises `ConfigError` with one line saying what is allowed.

numba's threading layer is chosen here, before numba's pool first starts (which
`numba.set_num_threads` does): numba's own `workqueue` unless
NUMBA_THREADING_LAYER says otherwise. OpenMP's workers spin while they wait,
and on a small machine they then fight BLAS's own spinning threads for the
cores (what that cost a training step on 2 cores: docs/benchmarks.md, the cpu
backend's kernels).
"""

from __future__ import annotations

import os

from microgpt.core.errors import ConfigError


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity where the OS reports it)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def check_threads(n) -> int:
    """n as an int when 1 <= n <= available_cores(); otherwise a ConfigError saying what is allowed."""
    cores = available_cores()
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= cores:
        raise ConfigError(f"--threads must be a whole number from 1 to {cores} (the cores this machine has), got {n!r}")
    return n


def import_numba():
    """numba, with the threading layer chosen (see the module docstring); ImportError without numba."""
    import numba

    if "NUMBA_THREADING_LAYER" not in os.environ:
        numba.config.THREADING_LAYER = "workqueue"
    return numba


def default_threads() -> int:
    """Every core, unless the environment already limits BLAS (OMP_NUM_THREADS or OPENBLAS_NUM_THREADS, as
    `microgpt train --procs` sets for each process)."""
    for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        value = os.environ.get(variable, "")
        if value.isdigit() and 1 <= int(value) <= available_cores():
            return int(value)
    return available_cores()


def set_threads(n: int | None = None) -> int:
    """Use n threads (default: `default_threads()`) for BLAS and numba's pool; returns n. (The cpu backend's
    kernels each run in one thread; the backend uses the count for the slices of a batch it runs at once.)"""
    n = default_threads() if n is None else check_threads(n)
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=n, user_api="blas")
    try:
        numba = import_numba()
    except ImportError:  # the numpy backend needs no numba; only BLAS has threads then
        return n
    try:
        numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))  # starts numba's pool in its layer
    except ValueError as exc:  # e.g. NUMBA_THREADING_LAYER=bogus, or tbb asked for but not installed
        raise ConfigError(f"numba cannot start its threads ({exc}); unset NUMBA_THREADING_LAYER or set it to one "
                          "of workqueue, omp, tbb, default") from None
    return n


def blas_thread_setter():
    """A function n -> None that sets the BLAS pool to n threads, cheaply (a few microseconds), for code
    that switches BLAS between one thread per caller and the whole pool."""
    from threadpoolctl import ThreadpoolController

    controller = ThreadpoolController()

    def set_blas_threads(n: int) -> None:
        controller.limit(limits=n, user_api="blas")

    return set_blas_threads
