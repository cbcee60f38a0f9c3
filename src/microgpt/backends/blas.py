"""Which BLAS the cpu backend multiplies with in float32: OpenBLAS (NumPy's) or MKL, chosen per machine.

Where MKL is installed (the `mkl` extra), a short measurement at start-up (a
few tenths of a second: `measure`) times both on one thread at a training
step's product shapes and takes the faster; the verdict is kept in a small
JSON file in the user's cache directory (`cache_path`), keyed by the
processor's model name, its core count and the libraries' versions
(`machine_key`), so each machine measures once. A cache that is missing,
unreadable or damaged is ignored and written again (atomically, through a
temporary file); one that cannot be written is left as it is. Without MKL
the choice is OpenBLAS, unmeasured.

`MICROGPT_BLAS=openblas|mkl` overrides the choice (`MICROGPT_BLAS=auto` or
unset: the measurement); the test suite pins openblas. The choice changes the
order of a product's float32 additions, so it belongs to what makes a run
repeatable: the summary line and results.jsonl name it, the checkpoint
records it, and a resume takes the checkpoint's where it can (docs/cpu.md).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from microgpt.backends import mkl_bf16
from microgpt.backends.base import BackendUnavailable
from microgpt.core.machine import processor_name
from microgpt.core.threads import available_cores
from microgpt.core.version import install_hint

BLASES = ("openblas", "mkl")  # what MICROGPT_BLAS and the checkpoint name
NAMES = {"openblas": "OpenBLAS", "mkl": "MKL"}  # as the summary line writes them
ENV = "MICROGPT_BLAS"
SHAPES = ((768, 128, 128), (768, 128, 512), (768, 512, 128))  # m, k, n: a d128 step's products (B12 x T64 rows)
PRODUCTS = {"openblas": lambda a, b, out: np.matmul(a, b, out=out), "mkl": mkl_bf16.sgemm}  # out = a @ b
REPEATS = 20  # calls per shape and library; the fastest of them counts


def requested() -> str:
    """MICROGPT_BLAS: "auto" (unset or empty), "openblas" or "mkl"; anything else is refused in one line."""
    value = os.environ.get(ENV, "").strip().lower() or "auto"
    if value not in ("auto", *BLASES):
        raise BackendUnavailable(f"{ENV}={os.environ[ENV]!r} is not a BLAS microgpt knows; set it to "
                                 f"{', '.join(BLASES)} or auto (measure and choose), or unset it")
    return value


def mkl_missing() -> str:
    """The one line saying MKL was asked for and is not installed, with the fix."""
    return f"MKL was asked for ({ENV}=mkl, or the checkpoint trained with it) but is not installed; " \
           f"{install_hint('mkl')}, or set {ENV}=openblas"


def choose(measure_with=None) -> str:
    """The BLAS for this process: MICROGPT_BLAS's where set, OpenBLAS without MKL, else this machine's cached
    verdict, measured (by `measure_with`, default `measure`) and cached when there is none."""
    asked = requested()
    if asked == "mkl" and mkl_bf16.mkl_library_path() is None:
        raise BackendUnavailable(mkl_missing())
    if asked != "auto":
        return asked
    if mkl_bf16.mkl_library_path() is None:
        return "openblas"
    key, path = machine_key(), cache_path()
    verdicts = read_cache(path)
    entry = verdicts.get(key)
    if isinstance(entry, dict) and entry.get("blas") in BLASES:
        return entry["blas"]
    entry = (measure_with or measure)()
    write_cache(path, {**verdicts, key: entry})
    return entry["blas"]


def cache_path() -> Path:
    """$XDG_CACHE_HOME/microgpt/blas.json (~/.cache where it is unset)."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "microgpt" / "blas.json"


def machine_key() -> str:
    """What the verdict depends on: the processor, its cores, NumPy's and its OpenBLAS's versions and MKL's."""
    from threadpoolctl import threadpool_info

    openblas = sorted({lib.get("version") or "?" for lib in threadpool_info() if lib.get("internal_api") == "openblas"})
    try:
        mkl = importlib.metadata.version("mkl")
    except importlib.metadata.PackageNotFoundError:
        mkl = "none"
    return (f"{processor_name()} | {available_cores()} cores | numpy {np.__version__} | "
            f"openblas {','.join(openblas) or 'none'} | mkl {mkl}")


def read_cache(path: Path) -> dict:
    """The cached verdicts, {key: {"blas": ..., ...}}; {} where the file is missing, unreadable or damaged."""
    try:
        verdicts = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return {}
    return verdicts if isinstance(verdicts, dict) else {}


def write_cache(path: Path, verdicts: dict) -> None:
    """verdicts written to path whole or not at all (a temporary file renamed over it); a directory that
    cannot be written leaves the cache as it was, and the next start measures again."""
    temp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=".blas-", suffix=".json", delete=False,
                                         encoding="utf-8") as handle:
            temp = Path(handle.name)
            json.dump(verdicts, handle, indent=1)
        os.replace(temp, path)
    except OSError:
        if temp is not None:
            with contextlib.suppress(OSError):
                temp.unlink(missing_ok=True)


def measure() -> dict:
    """Both libraries' float32 GFLOP/s on one thread at SHAPES (the fastest of REPEATS calls per shape, summed
    over the shapes), and the faster: {"blas": ..., "openblas_gflops": ..., "mkl_gflops": ...}."""
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    seconds = {"openblas": 0.0, "mkl": 0.0}
    flops = 0
    with threadpool_limits(limits=1, user_api="blas"):
        for m, k, n in SHAPES:
            a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
            out = np.empty((m, n), dtype=np.float32)
            flops += 2 * m * k * n
            for name, product in PRODUCTS.items():
                product(a, b, out)  # warm: first calls load and dispatch
                seconds[name] += min(_timed(product, a, b, out) for _ in range(REPEATS))
    rates = {name: flops / max(s, 1e-9) / 1e9 for name, s in seconds.items()}
    return {"blas": max(rates, key=rates.get), **{f"{name}_gflops": round(r, 1) for name, r in rates.items()}}


def _timed(product, a, b, out) -> float:
    start = time.perf_counter()
    product(a, b, out)
    return time.perf_counter() - start
