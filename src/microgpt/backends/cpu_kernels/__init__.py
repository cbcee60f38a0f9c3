"""The cpu backend's compiled kernels (numba), one idea per module, and `load()`, which readies them.

`load(dtype)` imports numba and the kernel modules, then runs every kernel once on
tiny arrays of `dtype`, so compilation (or loading from the disk cache) happens
at backend start-up, not in the middle of the first step. When no finished
compile for this numba, these sources and this dtype is recorded in the cache
directory, it says in one line on stderr that it is compiling. A cache entry
that cannot be read (a truncated or garbage file numba fails to unpickle) is
cleared, with one line naming the directory, and the kernels compile again. A
missing or broken numba becomes `BackendUnavailable` with the fix.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from microgpt.backends.base import BackendUnavailable

_READY: set[str] = set()  # dtypes whose kernels this process has compiled or loaded


def _import_kernels() -> SimpleNamespace:
    try:
        import numba  # noqa: F401 - imported first so its absence is reported as such

        from microgpt.backends.cpu_kernels import (
            adam,
            attention,
            bf16,
            column_sums,
            cross_entropy,
            embedding,
            hydra_draft,
            jit,
            layer_norm,
            relu,
            rope,
            weighted_sum,
            window_attention,
        )
    except Exception as exc:  # ImportError, or a broken llvmlite/numba raising anything
        raise BackendUnavailable(
            f"the cpu backend needs numba, which is not usable here ({type(exc).__name__}: {exc}); "
            "fix: pip install numba (or use --backend numpy)"
        ) from exc
    return SimpleNamespace(
        adam=adam, attention=attention, bf16=bf16, column_sums=column_sums, cross_entropy=cross_entropy,
        embedding=embedding, hydra_draft=hydra_draft, jit=jit, layer_norm=layer_norm, relu=relu, rope=rope,
        weighted_sum=weighted_sum, window_attention=window_attention,
    )


def _stamp(kernels: SimpleNamespace, dtype: np.dtype) -> Path | None:
    """The file that marks a finished compile for this numba version, kernel sources and dtype."""
    cache_dir = kernels.jit.CACHE_DIR
    if cache_dir is None:
        return None
    import numba

    digest = hashlib.sha256(numba.__version__.encode())
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.read_bytes())
    return cache_dir / f"microgpt-cpu-{dtype.name}-{digest.hexdigest()[:16]}.done"


def load(dtype) -> SimpleNamespace:
    """The kernel modules, with every kernel compiled (or loaded from the disk cache) for dtype."""
    dtype = np.dtype(dtype)
    kernels = _import_kernels()
    if dtype.name in _READY:
        return kernels
    stamp = _stamp(kernels, dtype)
    cold = stamp is None or not stamp.exists()
    if cold:
        where = (f"cached in {kernels.jit.CACHE_DIR}" if stamp else
                 f"no private cache directory ({'; '.join(kernels.jit.CACHE_REFUSED)}), so every run")
        print(f"microgpt: compiling the cpu backend's kernels for {dtype.name} (once; {where})...", file=sys.stderr)
    start = time.perf_counter()
    try:
        _warm_up(kernels, dtype)
    except Exception as exc:  # a damaged cache entry, or a broken LLVM or numba, shows here first
        if kernels.jit.CACHE_DIR is None:
            raise _did_not_compile(exc, None) from exc
        cleared = _clear_cache(kernels.jit.CACHE_DIR)
        print(f"microgpt: the cpu backend's kernel cache in {kernels.jit.CACHE_DIR} could not be read "
              f"({type(exc).__name__}: {exc}); cleared its {cleared} entries, compiling again...", file=sys.stderr)
        try:
            _warm_up(kernels, dtype)
        except Exception as again:
            raise _did_not_compile(again, kernels.jit.CACHE_DIR) from again
    if cold and stamp is not None:
        stamp.write_text(f"compiled in {time.perf_counter() - start:.1f} s\n")
    _READY.add(dtype.name)
    return kernels


def _did_not_compile(exc: Exception, cache_dir: Path | None) -> BackendUnavailable:
    where = f" (with an empty cache in {cache_dir})" if cache_dir is not None else " (without a cache)"
    return BackendUnavailable(f"the cpu backend's kernels did not compile{where}: {type(exc).__name__}: {exc}; "
                              "fix: pip install --upgrade numba (or use --backend numpy)")


def _clear_cache(cache_dir: Path) -> int:
    """Remove this package's kernel entries from numba's cache (the folders numba names after cpu_kernels, and
    the compile stamps) and nothing else there; how many were removed."""
    entries = [*cache_dir.glob("cpu_kernels_*"), *cache_dir.glob("microgpt-cpu-*.done")]
    for entry in entries:
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
    return len(entries)


def _warm_up(k: SimpleNamespace, dtype: np.dtype) -> None:
    """Call every kernel once on tiny arrays of dtype, the layouts the backend passes (C-contiguous)."""
    one = dtype.type(1)
    x = np.ones((2, 4), dtype=dtype)  # (rows, cols)
    row = np.ones((1, 4), dtype=dtype)  # (1, cols)
    ids = np.zeros(2, dtype=np.int32)  # (rows,)
    square = np.ones((4, 4), dtype=dtype)  # (n*T, T): one block of attention scores
    for bits in (None, np.empty((4, 4), np.uint16)) if dtype == np.float32 else (None,):  # fp32's and bf16's
        k.attention.causal_softmax(square, one, np.empty_like(square), 4, 0, bits)
        k.attention.causal_softmax_backward(square, square, one, np.empty_like(square), 4, 0, bits)
        rows_bits = None if bits is None else bits[:2]  # (rows, cols), as x
        k.relu.bias_relu_forward(x.copy(), row, np.empty_like(x), np.empty_like(x), rows_bits)
        k.relu.relu_backward(x, x, np.empty_like(x), rows_bits)
    if dtype == np.float32:  # bf16's rounding of a product's input: C-contiguous, and a view (a slice, a transpose)
        words = square.view(np.uint32)[None]  # (1, 4, 4)
        k.bf16.round_words(words, np.empty((1, 4, 4), np.uint16))
        k.bf16.round_words(words[:, :, :2], np.empty((1, 4, 2), np.uint16))
    ring = np.ones((1, 4, 4), dtype=dtype)  # (G, capacity, w): a KV cache's ring
    k.window_attention.window_attention(ring[:, :2].copy(), ring, ring, 2, 3, one, np.empty((1, 2, 4), dtype))
    k.layer_norm.layer_norm_forward(x, row, row, one, np.empty_like(x), np.empty_like(x), np.empty((2, 1), dtype))
    k.layer_norm.layer_norm_backward(x, x, np.ones((2, 1), dtype), row, np.empty_like(x), np.empty_like(row),
                                     np.empty_like(row))
    k.column_sums.column_sums(x, np.empty_like(row))
    k.cross_entropy.softmax_ce_grad(x, ids, np.empty_like(x))
    k.rope.rope(x.copy(), x, x, one)
    k.embedding.gather(x, ids, np.empty_like(x))
    k.embedding.scatter_add(x, ids, x.copy())
    stack, vector = np.ones((1, 1, 4, 4), dtype=dtype), np.ones((1, 1, 4), dtype=dtype)  # one hydra head, d = 4
    k.hydra_draft.greedy_drafts(np.ones(4, dtype=dtype), 0, 1, stack, vector, np.ones((1, 4, 4), dtype=dtype),
                                np.zeros((1, 1), np.int64), stack, vector, np.ones((1, 4, 4), dtype=dtype), row, one,
                                np.empty(1, np.int64), np.empty((1, 4), dtype=dtype))
    k.hydra_draft.head_logits(np.ones(4, dtype=dtype), np.zeros(1, np.int64), 0, stack, vector,
                              np.ones((1, 4, 4), dtype=dtype), np.zeros((1, 1), np.int64), stack, vector,
                              np.ones((1, 4, 4), dtype=dtype), row, one, np.empty(4, dtype=dtype))
    k.weighted_sum.add_weighted(row.copy(), x, np.ones(2, dtype=dtype), 0, 4)
    k.adam.adam(row.copy(), row, row.copy(), row.copy(), one, one, one, one, one, one, one)
    k.adam.adamw(row.copy(), row, row.copy(), row.copy(), row, row, one, one, one, one, one, one, one, one, one)
