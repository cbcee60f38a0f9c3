"""`microgpt train --procs N`: the same command run as N data-parallel processes under mpiexec.

It runs `mpiexec -n N python -m microgpt <the same arguments, less --procs>`,
using the mpiexec beside this Python (the mpich wheel of the `mpi` extra puts
one there) or else the first on PATH, and waits for it. Each process gets one
BLAS/OpenMP thread unless the environment already sets OMP_NUM_THREADS or
OPENBLAS_NUM_THREADS, so N processes do not fight over the cores. mpiexec runs
in its own session and this process passes the signals a run obeys on to it
(it hands them to every rank): a stop (Ctrl-C, SIGTERM, SIGHUP, SIGQUIT,
SIGXCPU) as SIGINT or SIGTERM, a save-and-go-on (SIGUSR1, SIGUSR2) as it came.
The ranks watch this process (its pid, in MICROGPT_LAUNCHER): should it die
without a word (kill -9), each rank stops itself as on SIGTERM, so rank 0
saves and none is left training and holding the checkpoint's lock. mpiexec's output passes through; when a rank
died without a word (kill -9, the out-of-memory killer), mpiexec's report gives
only its pid, so one more line names the rank, from rank 0's `processes:` line.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from microgpt.core.errors import DistributedError
from microgpt.core.version import install_hint
from microgpt.parallel.communicator import launched_size

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def find_mpiexec() -> str:
    beside = Path(sys.executable).parent / "mpiexec"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("mpiexec") or shutil.which("mpirun")
    if found is None:
        raise DistributedError("--procs needs mpiexec, and there is none beside this Python or on PATH; "
                               f"{install_hint('mpi')} brings one (MPICH)")
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


RANK_PLACE = re.compile(r"rank (\d+) pid (\d+) on ([^\s,]+)")  # rank 0's "processes:" line
DEAD_PID = re.compile(r"PID (\d+) RUNNING AT (\S+)")  # MPICH's report of a process that ended badly
DEAD_HOW = re.compile(r"EXIT STRING: ([^\n]+)")


def dead_rank_line(output: str, procs: int) -> str | None:
    """One line naming the rank that mpiexec reports dead, or None when the output names none."""
    dead = DEAD_PID.search(output)
    if dead is None:
        return None
    pid, host = dead.groups()
    same_pid = [(rank, where) for rank, rank_pid, where in RANK_PLACE.findall(output) if rank_pid == pid]
    same_host = [rank for rank, where in same_pid if where == host]  # pids repeat only across machines
    rank = same_host[0] if same_host else same_pid[0][0] if len(same_pid) == 1 else None
    how = DEAD_HOW.search(output)
    who = f"rank {rank} of {procs}" if rank is not None else "a rank"
    return (f"microgpt train: error: {who} (pid {pid} on {host}) died"
            f"{': ' + how.group(1).strip() if how else ''}; mpiexec stopped every rank")


LAUNCHER_VARIABLE = "MICROGPT_LAUNCHER"  # the --procs parent's "pid start-time", which the ranks watch
WATCH_INTERVAL_S = 0.5


def process_identity(pid: int) -> str:
    """"PID START": the pid and, on Linux, the process's start time, so a reused pid is not taken for it."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return f"{pid} {fields[19]}"  # field 22 of stat: the start time in clock ticks
    except (OSError, IndexError):
        return f"{pid} ?"


def _alive(identity: str) -> bool:
    """Whether the process of `identity` still runs (a zombie, dead but not yet reaped, does not)."""
    pid = int(identity.split()[0])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    state = process_state(pid)  # None without /proc: the signal test above is all there is
    return state not in ("Z", "X") and (identity.endswith(" ?") or process_identity(pid) == identity)


def watch_launcher(environ=os.environ) -> None:
    """In a rank started by `--procs`: a daemon thread that sends this process SIGTERM (save and stop) once
    the launcher is gone. Nothing without the variable (mpiexec or srun started by hand)."""
    identity = environ.get(LAUNCHER_VARIABLE)
    if not identity:
        return

    def watch() -> None:
        while _alive(identity):
            time.sleep(WATCH_INTERVAL_S)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="microgpt-launcher-watch", daemon=True).start()


STOPS_AS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM, "SIGHUP": signal.SIGTERM, "SIGQUIT": signal.SIGTERM,
            "SIGXCPU": signal.SIGTERM, "SIGUSR1": signal.SIGUSR1, "SIGUSR2": signal.SIGUSR2}


def relaunch(procs: int, argv: list[str]) -> int:
    """Run this command without --procs as `procs` ranks under mpiexec; mpiexec's exit status."""
    if launched_size()[0] > 1:
        raise DistributedError("--procs starts its own mpiexec, but this process was already started by one; "
                               "drop --procs (or run without mpiexec/srun)")
    command = [find_mpiexec(), "-n", str(procs), sys.executable, "-m", "microgpt", *without_procs(argv)]
    sys.stdout.flush()
    env = {**child_environment(), LAUNCHER_VARIABLE: process_identity(os.getpid())}
    job = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, start_new_session=True)
    stopper = JobStopper(job)
    passed_on = {getattr(signal, name): sent for name, sent in STOPS_AS.items() if hasattr(signal, name)}
    forward = {sig: signal.signal(sig, lambda signum, frame: stopper.pass_on(signum, passed_on[signum]))
               for sig in passed_on}
    head = tail = b""  # the start holds rank 0's "processes:" line, the end mpiexec's report
    try:
        while chunk := os.read(job.stdout.fileno(), 1 << 16):
            sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()
            head, tail = (head + chunk)[: 1 << 16] if len(head) < 1 << 16 else head, (tail + chunk)[-(1 << 16):]
        status = job.wait()
    finally:
        for sig, handler in forward.items():
            signal.signal(sig, handler)
        stopper.cancel()
    if stopper.why_killed is not None:
        print(f"microgpt train: error: the job was killed {stopper.why_killed}; the checkpoint on disk is the "
              "last one saved", file=sys.stderr)
        return 128 + stopper.stop
    line = dead_rank_line((head + tail).decode("utf-8", "replace"), procs) if status else None
    if line:
        print(line, file=sys.stderr)
    return status if status >= 0 else 128 - status  # killed by a signal: the shell's 128 + N


STOP_GRACE_S = 10.0  # after a stop is passed on, how long before the launcher looks for a stopped rank


class JobStopper:
    """Passes the launcher's signals on to mpiexec. A stopped rank (SIGSTOP) would keep the others, and
    mpiexec, waiting for ever: STOP_GRACE_S after a stop, and every STOP_GRACE_S after that, the job is killed
    if one of its processes is stopped; a second stop kills it at once. A job that is merely slow (a long step,
    a big save) is left to finish, and one line says how to end it sooner."""

    def __init__(self, job: subprocess.Popen):
        self.job = job
        self.stop: int | None = None  # the first stop signal received
        self.why_killed: str | None = None  # set when the launcher killed the job
        self._timer: threading.Timer | None = None
        self._said_slow = False

    def pass_on(self, received: int, sent: int) -> None:
        if sent not in (signal.SIGINT, signal.SIGTERM):
            self.job.send_signal(sent)  # a save-and-go-on
        elif self.stop is not None:
            self.kill(f"at a second stop signal ({signal.Signals(received).name})")
        else:
            self.stop = received
            self.job.send_signal(sent)
            self._arm()

    def _arm(self) -> None:
        self._timer = threading.Timer(STOP_GRACE_S, self._look)
        self._timer.daemon = True
        self._timer.start()

    def _look(self) -> None:
        """A while after the stop: kill the job if a process of it is stopped, else say so once and wait on."""
        if self.job.poll() is not None:
            return
        stopped = [pid for pid in descendants(self.job.pid) if process_state(pid) in ("T", "t")]
        if stopped:
            self.kill(f"{STOP_GRACE_S:g} s after {signal.Signals(self.stop).name}, with process "
                      f"{', '.join(map(str, stopped))} stopped (SIGSTOP)")
            return
        if not self._said_slow:
            self._said_slow = True
            print(f"microgpt train: the ranks are still finishing their step and saving {STOP_GRACE_S:g} s after "
                  f"{signal.Signals(self.stop).name}; send it again to kill them at once", file=sys.stderr, flush=True)
        self._arm()

    def kill(self, why: str) -> None:
        if self.job.poll() is not None or self.why_killed is not None:
            return
        self.why_killed = why
        for pid in [*descendants(self.job.pid), self.job.pid]:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


def process_state(pid: int) -> str | None:
    """The state letter of a process (Linux /proc: R, S, D, T, Z, ...), or None where it cannot be read."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def descendants(root: int) -> list[int]:
    """The processes below `root` (Linux: from /proc; elsewhere none are found and only root is killed)."""
    parents = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    below, frontier = [], {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier}
        below.extend(frontier)
    return below
