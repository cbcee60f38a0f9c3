"""Ask the C allocator to keep freed memory, so each training step does not fault it back in.

A NumPy training step allocates its activations afresh (megabytes per layer at
batch 16) and frees them at the end of the step. By default glibc hands large
freed blocks straight back to the operating system, and the next step pays a
page fault for every 4 KiB it touches again: about 40% of a batch-16 step of the
default model on a 2-core machine (benchmarks/profile_step.py shows it). Raising
glibc's mmap and trim thresholds keeps those blocks in the heap for reuse, the
way a caching allocator does. The setting is process-wide and only affects
glibc (Linux); elsewhere this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt parameters, from glibc's malloc.h
MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's largest allowed value: bigger blocks still come from mmap
TRIM_THRESHOLD = 512 * 1024 * 1024  # free heap kept before any is returned to the system

_done = False


def keep_freed_memory() -> bool:
    """Raise glibc's thresholds once per process; True when they were set."""
    global _done
    if _done:
        return True
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    libc = ctypes.CDLL(name)
    if not hasattr(libc, "mallopt") or not hasattr(libc, "gnu_get_libc_version"):
        return False  # not glibc
    _done = bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return _done
