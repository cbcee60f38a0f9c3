"""Launching an emulated kernel on NumPy buffers, as CuPy's `RawKernel.__call__` would on device arrays.

Before the kernel runs, the launch checks the arguments against the C signature, the grid and
block against CUDA's limits, and that no array written overlaps another argument (each gets its
own copy below). Each array is copied into a buffer with GUARD bytes of 0xff on either side (a NaN to a
float read, -1 to an int read); after the kernel, a changed guard byte is an out-of-bounds write,
and the interior is copied back. A launch still synchronising after TIME_LIMIT seconds fails
(an endless loop). Any failure raises `KernelError`.

`schedule(order)` sets the order blocks and threads run in (0 ascending, 1 descending, larger a
seeded shuffle), so tests can show a result does not depend on it.
"""

from __future__ import annotations

import contextlib
import ctypes
import math

import numpy as np

from cuda_emulator.signatures import Parameter, check_arguments

GUARD = 4096  # bytes of 0xff before and after every array argument
TIME_LIMIT = 60.0  # seconds a launch may run; the largest test launch takes well under one
MAX_THREADS, MAX_BLOCK = 1024, (1024, 1024, 64)
MAX_GRID = (2**31 - 1, 65535, 65535)
_order = [0]


class KernelError(RuntimeError):
    """An emulated kernel broke a rule of the CUDA execution model, or wrote out of bounds."""


@contextlib.contextmanager
def schedule(order: int):
    """Run launches inside the block with blocks and threads in `order`."""
    previous, _order[0] = _order[0], order
    try:
        yield
    finally:
        _order[0] = previous


def _dims(value, what: str, limits) -> tuple[int, int, int]:
    dims = tuple(int(v) for v in (value if isinstance(value, tuple) else (value,)))
    dims += (1,) * (3 - len(dims))
    if len(dims) != 3 or any(d < 1 or d > limit for d, limit in zip(dims, limits)):
        raise KernelError(f"{what} {value} is outside CUDA's limits {limits}")
    return dims


class EmulatedKernel:
    """One kernel of a compiled library, callable as `kernel(grid, block, args, shared_mem=0)`."""

    def __init__(self, library: ctypes.CDLL, name: str, params: list[Parameter]):
        self.name, self.params = name, params
        self._entry = getattr(library, f"emu_launch_{name}")
        self._entry.restype = ctypes.c_int
        self.launches = 0

    def __call__(self, grid, block, args, shared_mem: int = 0) -> None:
        check_arguments(self.name, self.params, args)
        grid, block = _dims(grid, "grid", MAX_GRID), _dims(block, "block", MAX_BLOCK)
        if math.prod(block) > MAX_THREADS:
            raise KernelError(f"{self.name}: block {block} has more than {MAX_THREADS} threads")
        if shared_mem:
            raise KernelError(
                f"{self.name}: dynamic shared memory is not emulated (no kernel of ours uses it)"
            )
        arrays = [(p, a) for p, a in zip(self.params, args) if p.is_pointer]
        for i, (p, a) in enumerate(arrays):
            for q, b in arrays[i + 1 :]:
                if not (p.c_type.startswith("const") and q.c_type.startswith("const")) and np.shares_memory(
                    a, b
                ):
                    raise KernelError(f"{self.name}: {p.name} and {q.name} overlap, and one is written")
        guarded, values = [], []
        for param, arg in zip(self.params, args):
            if param.is_pointer:
                buffer = np.full(arg.nbytes + 2 * GUARD, 0xFF, dtype=np.uint8)
                buffer[GUARD : GUARD + arg.nbytes] = arg.reshape(-1).view(np.uint8)
                guarded.append((param, arg, buffer))
                values.append(np.array([buffer.ctypes.data + GUARD], dtype=np.uintp))
            else:
                values.append(np.array([arg], dtype=param.dtype))
        pointers = (ctypes.c_void_p * len(values))(*(v.ctypes.data for v in values))
        message = ctypes.create_string_buffer(1024)
        failed = self._entry(
            (ctypes.c_uint * 3)(*grid), (ctypes.c_uint * 3)(*block), ctypes.c_int(_order[0]),
            ctypes.c_double(TIME_LIMIT), pointers, message, ctypes.c_int(len(message)),
        )  # fmt: skip
        self.launches += 1
        if failed:
            raise KernelError(f"{self.name}: {message.value.decode()}")
        for param, arg, buffer in guarded:
            for side, guard in (("before", buffer[:GUARD]), ("after", buffer[GUARD + arg.nbytes :])):
                if (guard != 0xFF).any():
                    raise KernelError(f"{self.name}: wrote out of bounds {side} {param.c_type} {param.name}")
            if not param.c_type.startswith("const"):
                arg.reshape(-1).view(np.uint8)[...] = buffer[GUARD : GUARD + arg.nbytes]
