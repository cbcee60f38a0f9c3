"""The MPI communicator (mpi4py): several processes train one model, data-parallel.

Imported only when a launcher started several processes (communicator.py
decides). Gradients are averaged with one in-place all-reduce on the flat
gradient buffer per step; the loss and the stop and save flags travel in one
three-number all-reduce, so every rank sees the same mean loss, and stops
(or saves and goes on) at the same step.

Failure: `failing_together` turns an exception in any rank into one line on
stderr naming the rank, then `MPI_Abort`, which makes the launcher end every
process at once (a rank left waiting in a collective would otherwise hang the
job). A rank killed outright (kill -9, out of memory) is noticed by the
launcher itself, which ends the others within about a second (tests/parallel/test_mpi.py
holds this to the 30 s limit). A rank that stops without dying (SIGSTOP, a stuck
filesystem) is caught by the watchdog: every collective here is nonblocking
(`Iallreduce`), polled until the limit of watchdog.py; past it, the waiting ranks
call the roll on a communicator of their own (each sends the number of the
collective it waits in to every other), and those that do not answer within
ROLL_CALL_S are the ones that did not arrive. The lowest rank that answered
raises `HungRanks` for `failing_together` to print, naming them, and aborts.

The line must be read before the abort is sent: MPICH's mpiexec exits as soon
as an abort reaches it (HYD_pmiserv_abort), and its hydra proxy, finding the
abort and the rank's stderr ready at once, forwards the abort first, so the line
(and MPICH's own `Abort(...)` line) was lost: under strace, the proxy's write of
it to the exited mpiexec failed with EPIPE. It happened when the proxy was not
scheduled between the rank's print and its abort: 14 of 160 runs of
`failing_together` on one core, and the stopped-rank tests' empty stderr in
full-suite runs. So a rank waits, at most REPORT_READ_S, until the proxy has
read its stderr pipe (`wait_until_read`); the proxy forwards what it reads
before it looks at the abort, which is sent only then (0 of 160 runs lost it;
MPICH's own line, written inside MPI_Abort, can still be lost so).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import struct
import sys
import termios
import time
from collections.abc import Iterator

import numpy as np
from mpi4py import MPI

from microgpt.core.errors import DistributedError, HungRanks, Named, TrainingStopped, WriterStopped
from microgpt.parallel.watchdog import CollectiveTimeout

# Ranks other than 0 wait this long before reporting their own error, so that an error every rank hits
# (a bad flag, a missing file) is reported once, by rank 0, whose abort ends the others first.
OTHER_RANKS_REPORT_DELAY_S = 1.0
# A rank other than 0 leaves the report of a stop that every rank reaches together (a NaN loss) to rank 0
# and exits with the CLI's user-error status.
QUIET_EXIT_STATUS = 2
ABORT_STATUS = 1
# A collective is polled without a pause for SPIN_S (so a step pays no latency for the watchdog), then every POLL_S.
SPIN_S, POLL_S = 0.05, 0.001
ROLL_CALL_S = 2.0  # how long the roll call waits for the ranks to answer
ROLL_CALL = 1  # the tag of its messages
REPORTER_WAIT_S = 5.0  # how long a live rank other than the reporter waits for the reporter's abort
REPORT_READ_S = 2.0  # how long a rank about to abort waits for its stderr line to be read (wait_until_read)


def wait_until_read(fd: int, limit_s: float) -> bool:
    """Wait until nothing written to `fd` is left unread, or `limit_s` passed; True when it was all read.

    Only a pipe is waited for (what mpiexec's proxy, a shell pipeline or a test gives a rank): Linux reports the
    bytes unread in a pipe (FIONREAD) at either end. A file, a terminal or /dev/null is done when written."""
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return True
        end = time.monotonic() + limit_s
        while struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0" * 4))[0] > 0:
            if time.monotonic() >= end:
                return False
            time.sleep(POLL_S)
    except OSError:  # a closed descriptor, or a system that does not count a pipe's bytes: nothing to wait for
        return True
    return True


class MPICommunicator:
    def __init__(self, comm=None):
        self.comm = comm or MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.is_writer = self.rank == 0
        node = self.comm.Split_type(MPI.COMM_TYPE_SHARED)  # the ranks on this machine
        self.local_rank, self.local_size = node.Get_rank(), node.Get_size()
        node.Free()
        self.places = self.comm.allgather((MPI.Get_processor_name(), os.getpid()))  # each rank's (host, pid)
        self._agreed: BaseException | None = None  # an error every rank agreed on, passed on without an abort
        self.timeout = CollectiveTimeout()
        self._roll = self.comm.Dup()  # the roll call's messages, apart from training's
        self._collectives = 0  # watched collectives so far: the same count on every rank

    def time_out_after(self, seconds: float | None) -> None:
        """--collective-timeout: the limit of every watched collective; None derives it from the steps."""
        self.timeout.fixed = seconds

    def _sum(self, buffer: np.ndarray, what: str) -> None:
        """Sum `buffer` over the ranks in place, waiting at most the watchdog's limit for them."""
        self._collectives += 1
        request = self.comm.Iallreduce(MPI.IN_PLACE, buffer, op=MPI.SUM)
        seconds = self.timeout.seconds()
        start = time.monotonic()
        while not request.Test():
            waited = time.monotonic() - start
            if waited > seconds or self._roll.Iprobe(source=MPI.ANY_SOURCE, tag=ROLL_CALL):
                raise self._call_the_roll(what, seconds)
            if waited > SPIN_S:
                time.sleep(POLL_S)

    def _call_the_roll(self, what: str, seconds: float) -> HungRanks:
        """Which ranks wait in this collective too: each live rank sends its count to every other and listens
        for theirs for ROLL_CALL_S. The error names the others."""
        for peer in range(self.size):
            if peer != self.rank:
                self._roll.isend(self._collectives, dest=peer, tag=ROLL_CALL)
        here, status = {self.rank}, MPI.Status()
        end = time.monotonic() + ROLL_CALL_S
        while len(here) < self.size and time.monotonic() < end:
            if self._roll.Iprobe(source=MPI.ANY_SOURCE, tag=ROLL_CALL, status=status):
                if self._roll.recv(source=status.Get_source(), tag=ROLL_CALL) == self._collectives:
                    here.add(status.Get_source())
            else:
                time.sleep(POLL_S)
        missing = [rank for rank in range(self.size) if rank not in here]
        limit = (f" within {seconds:g} s (", Named("collective_timeout"), ")")
        if not missing:
            return HungRanks(f"the {what} did not complete", *limit, " although every rank reached it (a network "
                             "fault?)", reports=self.rank == 0)
        who = f"rank{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} of {self.size}"
        return HungRanks(f"{who} did not reach the {what}", *limit, ": hung or stopped", reports=self.rank == min(here))

    def allreduce_mean(self, buffer: np.ndarray) -> None:
        """Replace `buffer` (a contiguous host array) by its mean over the ranks, in place."""
        self._sum(buffer, "gradient all-reduce")
        buffer *= buffer.dtype.type(1.0 / self.size)

    def agree(self, loss: float, stop: bool, save: bool = False) -> tuple[float, bool, bool]:
        """(the mean loss over the ranks, whether any rank asked to stop, whether any asked to save and go on);
        a NaN anywhere makes the mean NaN."""
        numbers = np.array([loss, float(stop), float(save)], dtype=np.float64)
        self._sum(numbers, "loss all-reduce")
        self.timeout.step_done()
        return float(numbers[0]) / self.size, bool(numbers[1] > 0), bool(numbers[2] > 0)

    def use_local_gpu(self) -> None:
        """One process per GPU: this rank uses the GPU of its rank among the ranks on its machine."""
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
        if self.local_size > count:
            raise DistributedError(f"{self.local_size} processes on this machine but {count} GPUs; "
                                   "start one process per GPU (mpiexec -n <GPUs per machine x machines>)")
        cupy.cuda.Device(self.local_rank).use()

    def for_backend(self, backend):
        """The communicator for a backend's buffers: NCCL on the GPU (never a host copy), MPI for host arrays."""
        if backend.name != "cuda":
            return self
        from microgpt.parallel.nccl import NCCLCommunicator

        return NCCLCommunicator.from_mpi(self)

    @contextlib.contextmanager
    def preparing_together(self, command: str = "microgpt") -> Iterator[None]:
        """Run the body (a run's checks and set-up, before any collective of training), then agree on how it
        went in one collective. When any rank failed, every rank ends with the user-error status and no
        MPI_Abort: rank 0 raises its own error for the CLI to print as one line, or, where rank 0 was fine,
        the failing rank prints its error itself."""
        error = None
        try:
            yield
        except Exception as exc:  # noqa: BLE001 - every rank must hear of it before anyone raises
            error = exc
        failed = np.array([error is not None and self.is_writer, error is not None], dtype=np.float64)
        self._sum(failed, "set-up check")
        writer_failed, any_failed = failed[0] > 0, failed[1] > 0
        if error is not None and self.is_writer:
            self._agreed = error
            raise error
        if error is not None and not writer_failed:
            print(f"{command}: error: rank {self.rank} of {self.size}: {error}", file=sys.stderr, flush=True)
        if any_failed:
            self._agreed = SystemExit(QUIET_EXIT_STATUS)
            raise self._agreed

    @contextlib.contextmanager
    def failing_together(self, command: str = "microgpt") -> Iterator[None]:
        """Run the body; an exception in this rank stops every rank, reported as `command: error: rank ...`
        (a stop they all reached together is re-raised for rank 0 to report)."""
        try:
            yield
        except WriterStopped as exc:  # rank 0 alone saw it (a refused save): the others must be stopped
            print(f"{command}: error: {exc}", file=sys.stderr, flush=True)
            self._abort()
        except HungRanks as exc:  # every live rank has it; one prints it
            if not exc.reports:
                time.sleep(REPORTER_WAIT_S)  # the reporter's abort ends this process first
            print(f"{command}: error: {exc}; stopping every rank", file=sys.stderr, flush=True)
            self._abort()
        except TrainingStopped:
            if self.is_writer:
                raise
            raise SystemExit(QUIET_EXIT_STATUS) from None
        except BaseException as exc:
            if exc is self._agreed or (isinstance(exc, SystemExit) and exc.code in (0, None)):
                raise  # every rank knows of it and is ending (preparing_together), or a clean exit
            if not self.is_writer:
                time.sleep(OTHER_RANKS_REPORT_DELAY_S)
            message = str(exc) or type(exc).__name__
            print(f"{command}: error: rank {self.rank} of {self.size} failed: {message}; stopping every rank",
                  file=sys.stderr, flush=True)
            self._abort()

    def _abort(self) -> None:
        """End every rank (MPI_Abort), once the line just printed to stderr has left this process's pipe."""
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.flush()
        wait_until_read(2, REPORT_READ_S)  # fd 2, where Python's stderr and MPICH's Abort line go
        self.comm.Abort(ABORT_STATUS)

    def describe(self) -> str:
        return f"{self.size} processes (MPI)"

    def placement(self) -> str:
        """Where each rank runs, so that a launcher's report of a dead process id names its rank."""
        return ", ".join(f"rank {rank} pid {pid} on {host}" for rank, (host, pid) in enumerate(self.places))
