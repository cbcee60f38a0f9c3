"""`microgpt train --procs N`: the same command re-run as N data-parallel processes under mpiexec.

The process replaces itself with `mpiexec -n N python -m microgpt <the same
arguments, less --procs>`, using the mpiexec beside this Python (the mpich
wheel of the `mpi` extra puts one there) or else the first on PATH. Each
process gets one BLAS/OpenMP thread unless the environment already sets
OMP_NUM_THREADS or OPENBLAS_NUM_THREADS, so N processes do not fight over the
cores. Signals go straight to mpiexec, which passes Ctrl-C and SIGTERM on to
every rank.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from microgpt.distributed import DistributedError, launched_size

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def find_mpiexec() -> str:
    beside = Path(sys.executable).parent / "mpiexec"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("mpiexec") or shutil.which("mpirun")
    if found is None:
        raise DistributedError("--procs needs mpiexec, and there is none beside this Python or on PATH; "
                               "pip install -e \".[mpi]\" brings one (MPICH)")
    return found


def without_procs(argv: list[str]) -> list[str]:
    """The arguments less `--procs N` / `--procs=N`."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--procs":
            skip = True
        elif not arg.startswith("--procs="):
            kept.append(arg)
    return kept


def child_environment(environ=os.environ) -> dict[str, str]:
    env = dict(environ)
    for variable in THREAD_VARIABLES:
        env.setdefault(variable, "1")
    return env


def relaunch(procs: int, argv: list[str]) -> None:
    """Replace this process by mpiexec running `procs` copies of this command without --procs; never returns."""
    if launched_size()[0] > 1:
        raise DistributedError("--procs starts its own mpiexec, but this process was already started by one; "
                               "drop --procs (or run without mpiexec/srun)")
    mpiexec = find_mpiexec()
    command = [mpiexec, "-n", str(procs), sys.executable, "-m", "microgpt", *without_procs(argv)]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(mpiexec, command, child_environment())
