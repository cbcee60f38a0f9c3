"""A real Slurm (tests/slurm_cluster.py: one localhost node, 2 CPUs) runs a 2-task job the way
examples/slurm/ does: `sbatch` a script with `--requeue` and `--signal`, whose `srun --mpi=pmi2` starts two
ranks of `microgpt train --resume auto` (the mpich wheel's PMI client speaks Slurm's pmi2).

- `scontrol requeue` in the middle of the run: slurmd sends SIGTERM to every rank, rank 0 saves, and the job's
  second go resumes from that save and ends bit-identical (every tensor of model and optimizer) to a run
  nobody touched.
- `scancel --signal=USR1 --batch` signals the batch shell alone; the script passes it to srun, which passes it
  to the ranks: rank 0 saves once and the run trains on to the same final weights.
- `sbatch --signal=B:USR1@55` with a one-minute limit: the time-limit warning reaches the batch shell as
  `--batch` does, and the run saves once and trains on.
- A rank SIGSTOPped in the middle of the run: the other gives up after `--collective-timeout`, names it in one
  line, and the job ends failed with its last checkpoint whole.

A tiny model, 3000 steps of global batch 8: a run is a few seconds. Skipped, with the reason, where Slurm,
munge, mpi4py or root is missing.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from extras import need
from slurm_cluster import SlurmCluster, mpi_plugin, skip_reason

pytestmark = [pytest.mark.mpi, pytest.mark.slurm]
if skip_reason():
    pytest.skip(skip_reason(), allow_module_level=True)
if mpi_plugin() != "pmi2":
    pytest.skip("this Slurm has no mpi/pmi2 plugin, which the mpich wheel needs under srun", allow_module_level=True)
need("mpi4py")
safetensors_numpy = pytest.importorskip("safetensors.numpy", reason="safetensors is not installed")

TINY = ["--preset", "reference", "--d-model", "16", "--heads", "2", "--n-layers", "1", "--d-ff", "32", "--seq-len", "16",
        "--backend", "numpy", "--threads", "1", "--batch-size", "8", "--gen", "0", "--quiet"]
STEPS, SAVE_EVERY = 3000, 500
JOB_TIMEOUT_S = 90  # a job takes 5-20 s on a loaded 2-core machine; the limit only stops a hung job hanging the suite

SCRIPT = """\
#!/bin/bash
#SBATCH --job-name=microgpt-test --ntasks=2 --cpus-per-task=1 --time=10
#SBATCH --requeue --signal=B:USR1@60 --open-mode=append --output={output}
trap 'kill -USR1 "$srun_pid"' USR1  # the warning reaches this shell alone; srun passes it to the ranks
srun --mpi=pmi2 {python} -m microgpt train {corpus} --model {model} --resume auto --steps {steps} {flags} &
srun_pid=$!
while :; do wait "$srun_pid"; status=$?; kill -0 "$srun_pid" 2>/dev/null || break; done  # a trap ends a wait
exit "$status"
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    started = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    yield started
    started.stop()


class Job:
    """One batch job: its id, its checkpoint and its output file (both goes of a requeued job append to it)."""

    def __init__(self, cluster: SlurmCluster, corpus: Path, where: Path, *flags: str, sbatch: tuple[str, ...] = ()):
        self.cluster, self.model, self.output = cluster, where / "run", where / "job.out"
        script = where / "job.sh"
        script.write_text(SCRIPT.format(output=self.output, python=sys.executable, corpus=corpus, model=self.model,
                                        steps=STEPS, flags=" ".join([*TINY, *flags])))
        submitted = cluster.command("sbatch", "--parsable", *sbatch, str(script))  # flags here win over #SBATCH
        assert submitted.returncode == 0, submitted.stderr
        self.id = submitted.stdout.strip().split(";")[0]

    def field(self, name: str) -> str:
        shown = self.cluster.command("scontrol", "show", "job", "-o", self.id).stdout
        found = re.search(rf"\b{name}=(\S+)", shown)
        return found.group(1) if found else ""

    def wait_until(self, ready, what: str) -> None:
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while not ready():
            if time.monotonic() > deadline:
                self.cluster.command("scancel", self.id)
                pytest.fail(f"job {self.id}: no {what} in {JOB_TIMEOUT_S} s (state {self.field('JobState')}); "
                            f"output:\n{self.text()}")
            time.sleep(0.2)

    def finish(self) -> None:
        self.wait_until(lambda: self.field("JobState") not in ("PENDING", "RUNNING", "COMPLETING", "REQUEUED"),
                        "end")
        assert (self.field("JobState"), self.field("ExitCode")) == ("COMPLETED", "0:0"), self.text()

    def text(self) -> str:
        return self.output.read_text() if self.output.exists() else "(no output yet)"


def tensors(model: Path) -> dict[str, np.ndarray]:
    """Every tensor of the checkpoint, model and optimizer, by file and name."""
    return {f"{file}:{name}": value for file in ("model.safetensors", "optimizer.safetensors")
            for name, value in safetensors_numpy.load_file(model / file).items()}


def assert_bit_identical(model: Path, reference: Path) -> None:
    got, want = tensors(model), tensors(reference)
    assert got.keys() == want.keys()
    differ = [name for name in want if got[name].tobytes() != want[name].tobytes()]
    assert not differ, f"tensors that differ from the uninterrupted run: {differ}"


@pytest.fixture(scope="module")
def reference(cluster, corpus, tmp_path_factory) -> Path:
    """The same 2-task job, run through untouched."""
    job = Job(cluster, corpus, tmp_path_factory.mktemp("reference"), "--save-every", str(SAVE_EVERY))
    job.finish()
    assert f"finished step {STEPS}" in job.text()
    return job.model


def test_requeued_job_resumes_from_its_save_and_ends_bit_identical(cluster, corpus, reference, tmp_path):
    job = Job(cluster, corpus, tmp_path, "--save-every", str(SAVE_EVERY))
    job.wait_until(lambda: (job.model / "train_state.json").exists(), "first save")
    requeued = cluster.command("scontrol", "requeue", job.id)
    assert requeued.returncode == 0, requeued.stderr
    # A requeued job waits (Reason=BeginTime, about two minutes here) before it may start again; let it go now.
    job.wait_until(lambda: job.field("JobState") == "PENDING", "pending state after the requeue")
    assert cluster.command("scontrol", "update", f"JobId={job.id}", "StartTime=now").returncode == 0
    job.finish()
    text = job.text()
    stopped = re.search(r"stopped at step (\d+)", text)
    assert stopped, f"the first go did not save on the requeue's SIGTERM:\n{text}"
    step = int(stopped.group(1))
    assert SAVE_EVERY <= step < STEPS
    assert f"slurm job {job.id}, restart 1: resuming {job.model} from step {step}" in text
    assert f"finished step {STEPS} ({STEPS - step} this run)" in text
    assert job.field("Restarts") == "1"
    assert_bit_identical(job.model, reference)


def test_usr1_to_the_batch_shell_saves_and_trains_on(cluster, corpus, reference, tmp_path):
    job = Job(cluster, corpus, tmp_path)  # no --save-every: the only save before the end is the one USR1 asks for
    job.wait_until(lambda: "processes: rank 0" in job.text(), "start")
    assert cluster.command("scancel", "--signal=USR1", "--batch", job.id).returncode == 0
    job.wait_until(lambda: (job.model / "train_state.json").exists(), "save after SIGUSR1")
    saved_at = json.loads((job.model / "train_state.json").read_text())["step"]
    job.finish()
    text = job.text()
    assert text.count("SIGUSR1: saving a checkpoint after this step, then training on") == 1, text
    assert 0 < saved_at < STEPS and f"finished step {STEPS} ({STEPS} this run)" in text, text
    assert_bit_identical(job.model, reference)


def test_the_time_limit_warning_of_sbatch_signal_saves_and_trains_on(cluster, corpus, tmp_path):
    """`--signal=B:USR1@55` with a one-minute limit: slurmctld sends the warning some seconds in (its timer runs
    every few tens of seconds, so it may come early or late by that much), to the batch shell, as
    `scancel --signal=USR1 --batch` does; the run saves once and trains on until it is cancelled."""
    job = Job(cluster, corpus, tmp_path, "--steps", "100000000", sbatch=("--time=1", "--signal=B:USR1@55"))
    job.wait_until(lambda: "SIGUSR1: saving a checkpoint after this step, then training on" in job.text(),
                   "time-limit warning")
    job.wait_until(lambda: (job.model / "train_state.json").exists(), "save after the warning")
    saved_at = json.loads((job.model / "train_state.json").read_text())["step"]
    assert cluster.command("scancel", job.id).returncode == 0  # SIGTERM: the run saves again and stops
    job.wait_until(lambda: job.field("JobState") not in ("PENDING", "RUNNING", "COMPLETING"), "end")
    text = job.text()
    assert text.count("SIGUSR1: saving a checkpoint after this step, then training on") == 1, text
    assert json.loads((job.model / "train_state.json").read_text())["step"] > saved_at, text  # it trained on


def rank_pids(job: Job) -> list[int]:
    """The job's training processes on this node (`scontrol listpids`), by their command line."""
    listed = job.cluster.command("scontrol", "listpids", job.id).stdout.split()
    ranks = []
    for pid in {int(word) for word in listed if word.isdigit()}:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"microgpt" in cmdline and b"train" in cmdline and not any(b"srun" in part for part in cmdline[:1]):
            ranks.append(pid)
    return sorted(ranks)


def test_a_stopped_rank_ends_the_job_within_the_timeout_naming_it(cluster, corpus, tmp_path):
    timeout_s = 5
    job = Job(cluster, corpus, tmp_path, "--save-every", str(SAVE_EVERY), "--steps", "1000000",
              "--collective-timeout", str(timeout_s))
    job.wait_until(lambda: (job.model / "train_state.json").exists() and len(rank_pids(job)) == 2,
                   "first save, with both ranks")
    hung = rank_pids(job)[-1]
    os.kill(hung, signal.SIGSTOP)
    try:  # without the watchdog the job waits for ever: wait_until fails it after JOB_TIMEOUT_S, a hang's limit
        job.wait_until(lambda: job.field("JobState") not in ("PENDING", "RUNNING", "COMPLETING"), "end")
    finally:
        if Path(f"/proc/{hung}").exists():
            os.kill(hung, signal.SIGCONT)
        cluster.command("scancel", job.id)
    text = job.text()
    errors = [line for line in text.splitlines() if line.startswith("microgpt train: error:")]
    assert len(errors) == 1 and "did not" in errors[0] and "Traceback" not in text, text
    assert job.field("JobState") == "FAILED", text
    assert tensors(job.model)  # the last save is whole and reads


def test_cluster_runs_two_pmi2_ranks(cluster):
    """The launch the jobs depend on: srun --mpi=pmi2 gives the mpich wheel's mpi4py a world of 2."""
    probe = "from mpi4py import MPI; print(MPI.COMM_WORLD.Get_size())"
    result = cluster.command("srun", "--mpi=pmi2", "-n", "2", sys.executable, "-c", probe, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["2", "2"]
