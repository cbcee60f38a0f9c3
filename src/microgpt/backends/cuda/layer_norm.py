"""LayerNorm on our kernels (layer_norm.cu), and the column sums its backward and the bias gradients need
(reduce_columns.cu).

`LayerNormKernels` is the mixin `CuBLASBackend` takes `layer_norm_forward`,
`layer_norm_backward` and `sum_rows` from. The column sums run in chunks of rows
(grid.y), each chunk's partial row summed again until one row is left.
"""

from __future__ import annotations

import math

import numpy as np

from microgpt.backends.cuda import kernel_launch as launch

COLUMN_TILE, ROW_LANES = 32, 8  # reduce_columns.cu's block shape
ROWS_PER_CHUNK = 128  # rows one column_sums block sums before its partial row is reduced again


class LayerNormKernels:
    """Needs `_cp`, `dtype`, `zeros`, the array checks of `DeviceArrays` and the launches of `KernelLaunches`."""

    def layer_norm_forward(self, x, gamma, beta):
        x = self._mat(x, "layer_norm_forward")
        rows, cols = x.shape
        gamma = self._row_vector("layer_norm_forward", "gamma", gamma, cols)
        beta = self._row_vector("layer_norm_forward", "beta", beta, cols)
        out, norm, bits = self._cp.empty_like(x), self._cp.empty_like(x), self._bits_for(x)  # each (rows, cols)
        std_inv = self._cp.empty((rows, 1), dtype=self.dtype)
        kernel, given = self._with_bits("layer_norm_forward", bits)
        self._per_row(
            "layer_norm.cu", kernel, x.shape, x, gamma, beta, out, norm, std_inv, *given, np.int32(rows),
            np.int32(cols),
        )
        return self._keep_bits(out, bits), norm, std_inv

    def layer_norm_backward(self, grad, norm, std_inv, gamma):
        op = "layer_norm_backward"
        grad, norm, std_inv = self._mat(grad, op), self._mat(norm, op), self._mat(std_inv, op)
        self._same_shape(op, grad, norm)
        rows, cols = grad.shape
        if std_inv.shape != (rows, 1):
            raise ValueError(f"{op}: std_inv must be ({rows}, 1), got {std_inv.shape}")
        gamma = self._row_vector(op, "gamma", gamma, cols)
        dx = self._cp.empty_like(grad)  # (rows, cols)
        self._per_row(
            "layer_norm.cu", "layer_norm_backward", grad.shape, grad, norm, std_inv, gamma, dx,
            np.int32(rows), np.int32(cols),
        )
        return dx, self._column_sums(grad, norm), self._column_sums(grad)

    def sum_rows(self, x):
        return self._column_sums(self._mat(x, "sum_rows"))

    def _column_sums(self, a, b=None):
        """New (1, cols): the column sums of a, or of a * b, over the rows (see reduce_columns.cu)."""
        rows, cols = a.shape
        if rows == 0:
            return self.zeros((1, cols))
        # the chunks are grid.y, which CUDA caps at 65535: past 65535 * 128 rows, each chunk takes more rows
        rows_per_chunk = max(ROWS_PER_CHUNK, math.ceil(rows / launch.MAX_GRID_Y))
        chunks = math.ceil(rows / rows_per_chunk)
        partial = self._cp.empty((chunks, cols), dtype=self.dtype)  # one partial sum per chunk of rows
        grid, block = (math.ceil(cols / COLUMN_TILE), chunks), (COLUMN_TILE, ROW_LANES)
        sizes = (np.int32(rows), np.int32(cols), np.int32(rows_per_chunk))
        if b is None:
            self._launch("reduce_columns.cu", "column_sums", grid, block, a, partial, *sizes)
        else:
            self._launch("reduce_columns.cu", "column_product_sums", grid, block, a, b, partial, *sizes)
        return partial if chunks == 1 else self._column_sums(partial)
