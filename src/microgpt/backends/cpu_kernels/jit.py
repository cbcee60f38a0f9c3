"""How the cpu backend's kernels are compiled: numba's njit, cached on disk in a writable directory.

The cache directory is, in order: NUMBA_CACHE_DIR when it is set and writable,
else $XDG_CACHE_HOME/microgpt/numba (~/.cache/microgpt/numba), else a
microgpt-numba folder in the temporary directory. Where none is writable the
kernels compile on every run (cache off) and still work. This module must be
imported before the kernel modules, since `kernel` reads the choice.

fastmath is limited to reassociation and fused multiply-add, so loops over a
row can be vectorised while NaN and infinity keep their meaning (a non-finite
loss must still be seen). Reassociation is fixed when a kernel is compiled, so
it does not make results depend on thread scheduling. error_model="numpy" makes a
division by zero give inf or NaN, as in NumPy, rather than raise (a NaN score row
sums to 0 and must come out as NaN probabilities, not an exception).
Every kernel runs in one thread (nogil, so several can run at once, one per
shard of a batch: cpu_streams.py): a parallel launch inside a kernel costs about
40 us here, more than a whole LayerNorm or bias gradient at these sizes
(measured on 2 cores, column sums of 2048 x 64: 8 us in one thread, 140 us with
prange).

numba comes through `microgpt.threads.import_numba`, which picks the threading layer.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from microgpt.threads import import_numba

numba = import_numba()

FASTMATH = {"reassoc", "contract"}


def _writable(path: Path) -> bool:
    try:
        path.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
    except OSError:
        return False
    return True


def cache_dir_candidates() -> list[Path]:
    """Where the cache may go, in order of preference (see the module docstring)."""
    candidates = [Path(numba.config.CACHE_DIR)] if numba.config.CACHE_DIR else []
    user_cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    candidates.append(Path(user_cache) / "microgpt" / "numba")
    candidates.append(Path(tempfile.gettempdir()) / "microgpt-numba")
    return candidates


def first_writable(paths: list[Path]) -> Path | None:
    """The first of paths that exists or can be made, and takes a new file; None if none does."""
    return next((path for path in paths if _writable(path)), None)


CACHE_DIR = first_writable(cache_dir_candidates())
if CACHE_DIR is not None:
    numba.config.CACHE_DIR = str(CACHE_DIR)  # numba's own locator reads this when a kernel is decorated


def kernel():
    """The decorator for a kernel: njit, cached where a directory allows."""
    return numba.njit(cache=CACHE_DIR is not None, fastmath=FASTMATH, error_model="numpy", nogil=True)


def inline():
    """The decorator for a helper that kernels call: inlined into them by numba (a call costs more than
    these short loops, and an inlined loop is vectorised with its caller's knowledge of the arrays)."""
    return numba.njit(inline="always", fastmath=FASTMATH, error_model="numpy")
