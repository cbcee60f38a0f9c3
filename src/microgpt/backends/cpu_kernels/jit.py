"""How the cpu backend's kernels are compiled: numba's njit, cached on disk in a writable directory.

The cache directory is, in order: NUMBA_CACHE_DIR when it is set, else
$XDG_CACHE_HOME/microgpt/numba (~/.cache/microgpt/numba), else
microgpt-numba-<uid> in the temporary directory (made with mode 0700). numba
unpickles what it finds in its cache, so a directory is used only when it is
private: a real directory (not a symlink) owned by this user that no other user
can write, and that takes a new file. Where none is, the kernels compile on
every run (cache off) and still work, and `CACHE_REFUSED` says why for the one
line the backend prints. This module must be imported before the kernel
modules, since `kernel` reads the choice.

fastmath is limited to reassociation and fused multiply-add, so loops over a
row can be vectorised while NaN and infinity keep their meaning (a non-finite
loss must still be seen). Reassociation is fixed when a kernel is compiled, so
it does not make results depend on thread scheduling. error_model="numpy" makes a
division by zero give inf or NaN, as in NumPy, rather than raise (a NaN score row
sums to 0 and must come out as NaN probabilities, not an exception).
Every kernel runs in one thread (nogil, so several can run at once, one per
slice of a batch: cpu_streams.py): a parallel launch inside a kernel costs
more than a whole LayerNorm or bias gradient at these sizes (what it cost on 2
cores: docs/benchmarks.md, the cpu backend's kernels).

numba comes through `microgpt.core.threads.import_numba`, which picks the threading layer.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from microgpt.core.threads import import_numba

numba = import_numba()

FASTMATH = {"reassoc", "contract"}


def refusal(path: Path) -> str | None:
    """Why `path` cannot hold the kernel cache (None when it can): made if missing, with mode 0700."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = path.lstat()
    except OSError as exc:
        return f"{path} cannot be made ({exc.strerror or exc})"
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        return f"{path} is not a directory of its own (a symlink or a file)"
    if info.st_uid != os.geteuid():
        return f"{path} belongs to another user (uid {info.st_uid})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{path} can be written by other users (mode {stat.S_IMODE(info.st_mode):o})"
    try:
        tempfile.TemporaryFile(dir=path).close()
    except OSError as exc:
        return f"{path} does not take a new file ({exc.strerror or exc})"
    return None


def cache_dir_candidates() -> list[Path]:
    """Where the cache may go, in order of preference (see the module docstring)."""
    candidates = [Path(numba.config.CACHE_DIR)] if numba.config.CACHE_DIR else []
    user_cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    candidates.append(Path(user_cache) / "microgpt" / "numba")
    candidates.append(Path(tempfile.gettempdir()) / f"microgpt-numba-{os.geteuid()}")
    return candidates


def first_private(paths: list[Path]) -> tuple[Path | None, list[str]]:
    """(the first of paths that can hold the cache, or None; why each one before it cannot)."""
    refused = []
    for path in paths:
        why = refusal(path)
        if why is None:
            return path, refused
        refused.append(why)
    return None, refused


CACHE_DIR, CACHE_REFUSED = first_private(cache_dir_candidates())
if CACHE_DIR is not None:
    numba.config.CACHE_DIR = str(CACHE_DIR)  # numba's own locator reads this when a kernel is decorated


def kernel():
    """The decorator for a kernel: njit, cached where a directory allows."""
    return numba.njit(cache=CACHE_DIR is not None, fastmath=FASTMATH, error_model="numpy", nogil=True)


def inline():
    """The decorator for a helper that kernels call: inlined into them by numba (a call costs more than
    these short loops, and an inlined loop is vectorised with its caller's knowledge of the arrays)."""
    return numba.njit(inline="always", fastmath=FASTMATH, error_model="numpy")
