"""Launching our kernels: compiling a kernel file once, and the grid and block shapes of the two launch kinds.

`KernelLaunches` is the mixin `CuBLASBackend`'s ops launch through. A kernel is
looked up by (file, name): its module is compiled by `cupy.RawModule` from
`loader.kernel_source` once per file and device for the process (`loader.MODULES`),
and the function is kept per backend. Row kernels run one block per row, sized to
the row; element-wise kernels run grid-stride loops on at most MAX_ELEMENT_BLOCKS
blocks. CUDA's limits are here too (the tests lower them to reach the edges cheaply).
"""

from __future__ import annotations

import math

from microgpt.backends.cuda.loader import MODULES, kernel_source

MAX_ROW_THREADS = 256  # threads per block for the one-block-per-row kernels
ELEMENT_THREADS = 256  # threads per block for the grid-stride element-wise kernels
MAX_ELEMENT_BLOCKS = 65535
MAX_GRID_Y = 65535  # CUDA's limit on gridDim.y (and z); gridDim.x may reach 2**31 - 1


def row_threads(cols: int) -> int:
    """Block size for a one-block-per-row kernel: whole warps, no more than the row needs, at most 256."""
    return min(MAX_ROW_THREADS, max(32, 32 * math.ceil(cols / 32)))


def element_grid(n: int) -> tuple[int]:
    return (min(math.ceil(n / ELEMENT_THREADS), MAX_ELEMENT_BLOCKS),)


class KernelLaunches:
    """Needs `_cp` (CuPy), `device_id` and a `_kernels` dict, which `CuBLASBackend.__init__` sets."""

    def _kernel(self, file_name: str, kernel_name: str):
        key = (file_name, kernel_name)
        if key not in self._kernels:
            module_key = (file_name, self.device_id)
            if module_key not in MODULES:
                MODULES[module_key] = self._cp.RawModule(code=kernel_source(file_name))
            self._kernels[key] = MODULES[module_key].get_function(kernel_name)
        return self._kernels[key]

    def _launch(self, file_name: str, kernel_name: str, grid: tuple, block: tuple, *args) -> None:
        if 0 in grid:
            return  # nothing to compute, and CUDA rejects an empty grid
        self._kernel(file_name, kernel_name)(grid, block, args)  # CuPy launches on its current stream

    def _per_row(self, file_name: str, kernel_name: str, shape: tuple[int, int], *args) -> None:
        """Launch a one-block-per-row kernel over a (rows, cols) array that has at least one column."""
        if shape[1] == 0:
            raise ValueError(f"{kernel_name}: the rows have no columns (shape {shape})")
        self._launch(file_name, kernel_name, (shape[0],), (row_threads(shape[1]),), *args)

    def _per_element(self, file_name: str, kernel_name: str, n: int, *args) -> None:
        self._launch(file_name, kernel_name, element_grid(n), (ELEMENT_THREADS,), *args)
