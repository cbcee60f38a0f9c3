"""The communicator a run trains through: one process, or several under an MPI launcher.

`communicator()` picks it once per process. Started by `mpiexec`, `mpirun` or
`srun` with more than one task (the launcher's environment says so), it is an
`MPICommunicator` (mpi.py, mpi4py); otherwise `SingleProcess`,
which imports nothing and changes nothing, so a lone process trains exactly as
it always did. Under a launcher without mpi4py it is a one-line error rather
than N independent runs overwriting one checkpoint.

The trainer sees only this interface: `rank`, `size`, `is_writer` (rank 0
writes every file and prints), `allreduce_mean` (in place, on the flat gradient
buffer, once per step), `agree` (the mean loss and whether any rank asked to
stop, or to save and go on, in one small collective), `time_out_after` (the
watchdog's limit, --collective-timeout; watchdog.py), `use_local_gpu` and `for_backend` (one GPU per
rank, gradients over NCCL), `preparing_together` (a run's set-up, after which
the ranks agree whether any of them failed, so that a bad flag or file ends
every rank with one line and the user-error status), and `failing_together`
(an error in any rank stops every rank instead of leaving them waiting in a
collective).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from microgpt.core.errors import DistributedError
from microgpt.core.version import install_hint

# What the launchers set in each process they start: (the task count, where it is found).
LAUNCHER_SIZE_VARIABLES = (
    ("PMI_SIZE", "mpiexec (MPICH, Intel MPI)"),
    ("OMPI_COMM_WORLD_SIZE", "mpirun (Open MPI)"),
    ("PMIX_SIZE", "a PMIx launcher"),
    ("SLURM_STEP_NUM_TASKS", "srun"),
)


class SingleProcess:
    """One process: every collective is the identity."""

    rank, size, local_rank, is_writer = 0, 1, 0, True

    def allreduce_mean(self, buffer) -> None:
        """The mean over one process is the buffer itself."""

    def agree(self, loss: float, stop: bool, save: bool = False) -> tuple[float, bool, bool]:
        return loss, stop, save

    def time_out_after(self, seconds: float | None) -> None:
        """One process waits for no other."""

    def use_local_gpu(self) -> None:
        """One process keeps CuPy's current device."""

    def for_backend(self, backend) -> SingleProcess:
        return self

    @contextlib.contextmanager
    def preparing_together(self, command: str = "microgpt") -> Iterator[None]:
        yield

    @contextlib.contextmanager
    def failing_together(self, command: str = "microgpt") -> Iterator[None]:
        yield

    def describe(self) -> str:
        return "1 process"


def launched_size(environ=os.environ) -> tuple[int, str | None]:
    """(tasks, launcher) as the environment of an MPI or Slurm launch says; (1, None) when not launched so."""
    for variable, launcher in LAUNCHER_SIZE_VARIABLES:
        value = environ.get(variable, "")
        if value.isdigit() and int(value) > 1:
            return int(value), launcher
    return 1, None


_COMMUNICATOR = None


def communicator():
    """This process's communicator, made on first use: MPI when a launcher started several tasks, else one process."""
    global _COMMUNICATOR
    if _COMMUNICATOR is None:
        size, launcher = launched_size()
        if size == 1:
            _COMMUNICATOR = SingleProcess()
        else:
            try:
                from microgpt.parallel.mpi import MPICommunicator
            except ImportError as exc:
                raise DistributedError(
                    f"{launcher} started {size} processes, but mpi4py is not installed ({exc}); without it they "
                    f"would train {size} separate models into one checkpoint; {install_hint('mpi')}"
                ) from None
            _COMMUNICATOR = MPICommunicator()
            if _COMMUNICATOR.size != size:
                raise DistributedError(
                    f"{launcher} started {size} processes, but MPI sees {_COMMUNICATOR.size}: this MPI does not "
                    "speak the launcher's protocol (e.g. srun with the mpich wheel); start them with the "
                    "mpiexec of the MPI that mpi4py uses, or srun --mpi=pmi2 with an MPI built for Slurm")
    return _COMMUNICATOR
