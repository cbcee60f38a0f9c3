"""A one-node Slurm cluster on localhost for the tests: a munge key, `munged`, a generated slurm.conf
(this machine's short hostname as the one node, 2 CPUs, no cgroups, PMI2 as the default MPI plugin), and
`slurmctld` and `slurmd` in the foreground as child processes, every file under one temporary directory.

`skip_reason()` says why the cluster cannot run here (not root, not Linux, a Slurm or munge program missing);
`SlurmCluster(root)` starts it, `.env` is the environment for the client commands (`SLURM_CONF`), and
`.stop()` ends the daemons it started. Debian's `slurm-wlm` package brings every program used.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path
from shutil import which

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "scontrol", "scancel", "sinfo", "squeue")
START_TIMEOUT_S = 60  # slurmctld and slurmd come up in a few seconds; the limit only stops a broken install hanging
CPUS = 2
KILL_WAIT_S = 10  # SIGTERM to SIGKILL when a job is cancelled or requeued: time for rank 0 to save

CONFIG = """\
ClusterName=microgpt
FirstJobId={first_job_id}
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge/munge.socket
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
SlurmdParameters=config_overrides
MpiDefault={mpi}
ReturnToService=2
JobRequeue=1
KillWait={kill_wait}
InactiveLimit=0
MinJobAge=600
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
"""


def skip_reason() -> str | None:
    """Why a Slurm cluster cannot be started here, or None."""
    if not sys.platform.startswith("linux"):
        return "the Slurm tests run on Linux only"
    if os.geteuid() != 0:
        return "the Slurm tests start slurmd and slurmctld as root (SlurmUser=root); not root here"
    missing = [name for name in (*DAEMONS, *CLIENTS) if not find(name)]
    if missing:
        return f"Slurm is not installed ({', '.join(missing)} missing; apt-get install slurm-wlm munge)"
    return None


def find(name: str) -> str | None:
    """A program on PATH or in /usr/sbin (daemons live there, often off a plain user's PATH)."""
    return which(name) or which(name, path="/usr/sbin:/sbin")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def mpi_plugin() -> str:
    """pmi2 where Slurm has the plugin (Debian's has), else none."""
    plugins = Path("/usr/lib/x86_64-linux-gnu/slurm-wlm"), Path("/usr/lib/slurm"), Path("/usr/lib64/slurm")
    return "pmi2" if any((where / "mpi_pmi2.so").exists() for where in plugins) else "none"


class SlurmCluster:
    """munged, slurmctld and slurmd for one localhost node, everything under `root`."""

    def __init__(self, root: Path):
        self.root = root
        self.host = socket.gethostname().split(".")[0]
        self.conf = root / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.processes: list[subprocess.Popen] = []
        for sub in ("munge", "state", "spool"):
            (root / sub).mkdir(mode=0o700, parents=True, exist_ok=True)
        # MPICH names a job's shared-memory segments after its PMI job: a cluster whose job ids start at 1 again
        # would meet the segment that a killed job of an earlier cluster left in /dev/shm under the same name,
        # and MPI_Init fails ("UCX ERROR failed to unpack address, invalid bandwidth 0.00"); ids of their own
        first_job_id = 1000 + secrets.randbelow(10**7)
        self.conf.write_text(CONFIG.format(first_job_id=first_job_id, host=self.host, root=root, ctld_port=free_port(),
                                           slurmd_port=free_port(),
                                           mpi=mpi_plugin(), kill_wait=KILL_WAIT_S, cpus=CPUS))
        self.start()

    def start(self) -> None:
        munge = self.root / "munge"
        key = munge / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self.spawn(find("munged"), "-F", "-f", f"--key-file={key}", f"--socket={munge}/munge.socket",
                   f"--pid-file={munge}/munged.pid", f"--log-file={munge}/munged.log", f"--seed-file={munge}/seed")
        self.wait_for(lambda: (munge / "munge.socket").exists(), "munged's socket")
        self.spawn(find("slurmctld"), "-D", "-c", "-f", str(self.conf))
        self.spawn(find("slurmd"), "-D", "-N", self.host, "-f", str(self.conf))
        self.wait_for(lambda: self.node_state() in ("idle", "idle*"), "the node to be idle")

    def spawn(self, *command: str) -> None:
        log = open(self.root / f"{Path(command[0]).name}.out", "w")  # noqa: SIM115 - kept open for the daemon's life
        self.processes.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                               start_new_session=True))

    def wait_for(self, ready, what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not ready():
            dead = [p.args[0] for p in self.processes if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"Slurm did not start ({what}; exited: {dead or 'none'}); logs in {self.root}")
            time.sleep(0.2)

    def command(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run(args, env=self.env, capture_output=True, text=True, timeout=timeout, check=False)

    def node_state(self) -> str:
        return self.command("sinfo", "-h", "-N", "-o", "%T").stdout.strip()

    def stop(self) -> None:
        """End the daemons, newest first (slurmd, slurmctld, munged), killing any that does not go in 10 s."""
        for process in reversed(self.processes):
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.processes.clear()
