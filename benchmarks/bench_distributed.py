"""Data-parallel CPU throughput: 1 process x 1 thread, 2 MPI ranks x 1 thread, 1 process x 2 threads.

Two shapes at the same global batch in every layout: the reference shape (d 64,
2 layers, 4 heads, d_ff 256, T 128) at B=16, and d 128, 4 layers, 4 heads,
d_ff 512, T 64 at B=12. Each layout runs in fresh processes (mpiexec for the
ranks), trains --warmup steps, then times --steps steps, --rounds times; the
best round counts and the median is printed beside it. For the ranks it also
reports the all-reduce share: the time inside the step's two collectives (the
loss agreement and the gradient all-reduce, including any wait for the slower
rank) over the step time.

    python benchmarks/bench_distributed.py [--steps 20] [--warmup 3] [--rounds 3]
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_distributed.py

Needs the mpi extra (pip install -e ".[mpi]"). Data: tinyshakespeare from
../shared when it is there, else random ids (benchmarks/corpus.py).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling modules below

SHAPES = {  # name: (model shape, global batch)
    "d64 2L T128 B16": ({"d_model": 64, "n_layers": 2, "d_ff": 256, "seq_len": 128}, 16),
    "d128 4L T64 B12": ({"d_model": 128, "n_layers": 4, "d_ff": 512, "seq_len": 64}, 12),
}
LAYOUTS = [  # (label, ranks, threads per rank)
    ("1 process x 1 thread", 1, 1),
    ("2 ranks x 1 thread", 2, 1),
    ("1 process x 2 threads", 1, 2),
]
VOCAB_SIZE = 65
LR = 3e-4


class TimedComm:
    """A communicator that adds up the seconds spent in its collectives."""

    def __init__(self, comm):
        self.comm, self.seconds = comm, 0.0

    def __getattr__(self, name):
        return getattr(self.comm, name)

    def allreduce_mean(self, buffer) -> None:
        start = time.perf_counter()
        self.comm.allreduce_mean(buffer)
        self.seconds += time.perf_counter() - start

    def agree(self, loss: float, stop: bool):
        start = time.perf_counter()
        agreed = self.comm.agree(loss, stop)
        self.seconds += time.perf_counter() - start
        return agreed


def worker(shape: str, steps: int, warmup: int, backend: str) -> None:
    """One rank of one round: prints {"tokens_per_s", "collective_share"} from rank 0."""
    from corpus import load_tokens
    from microgpt.backends import get_backend
    from microgpt.data.batches import SequentialBatches
    from microgpt.model.gpt import GPT, GPTConfig
    from microgpt.parallel.communicator import communicator
    from microgpt.training.data_parallel import RankShare, train_step
    from microgpt.training.optim import Optimizer

    dims, batch = SHAPES[shape]
    comm = TimedComm(communicator())
    tokens, _ = load_tokens(VOCAB_SIZE, seed=0, n_random=400_000)
    model = GPT(GPTConfig(vocab_size=VOCAB_SIZE, **dims), get_backend(backend), seed=0)  # threads: the env's
    batches = RankShare(SequentialBatches(tokens.astype("int32"), dims["seq_len"], batch), comm.rank, comm.size)
    adam = Optimizer.reference(model.params, LR)
    for _ in range(warmup):
        train_step(model, batches.next(), adam, comm)
    comm.seconds = 0.0
    start = time.perf_counter()
    for _ in range(steps):
        train_step(model, batches.next(), adam, comm)
    seconds = time.perf_counter() - start
    if comm.is_writer:
        print(json.dumps({"tokens_per_s": steps * batch * dims["seq_len"] / seconds,
                          "collective_share": comm.seconds / seconds}))


def run_round(shape: str, ranks: int, threads: int, args) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "OPENBLAS_NUM_THREADS": str(threads),
           "MKL_NUM_THREADS": str(threads)}
    command = [sys.executable, __file__, "--worker", shape, "--steps", str(args.steps), "--warmup", str(args.warmup),
               "--backend", args.backend]
    if ranks > 1:
        from microgpt.parallel.launch import find_mpiexec

        command = [find_mpiexec(), "-n", str(ranks), *command]
    result = subprocess.run(command, check=True, env=env, capture_output=True, text=True, timeout=900)
    return json.loads(result.stdout.strip().splitlines()[-1])


def cpu_model() -> str:
    try:
        lines = subprocess.run(["lscpu"], check=True, capture_output=True, text=True).stdout.splitlines()
        return next(line.split(":", 1)[1].strip() for line in lines if line.startswith("Model name"))
    except (OSError, subprocess.CalledProcessError, StopIteration):
        return "unknown CPU"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backend", choices=["cpu", "numpy"], default="cpu",
                        help="cpu (default; with 2 threads it runs a slice of the batch per thread) or numpy")
    parser.add_argument("--worker", choices=SHAPES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.steps, args.warmup, args.backend)
        return
    from corpus import load_tokens

    print(f"{cpu_model()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; "
          f"{load_tokens(VOCAB_SIZE, 0, 1)[1]}")
    print(f"backend {args.backend}; OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}, "
          f"OPENBLAS_L2_SIZE={os.environ.get('OPENBLAS_L2_SIZE', '(unset)')}; {args.steps} steps per round, "
          f"best of {args.rounds} (median beside it)")
    print(f"{'shape':<17} {'layout':<22} {'tokens/s best':>13} {'median':>9} {'all-reduce share':>16}")
    for shape in SHAPES:
        results = {label: [] for label, _, _ in LAYOUTS}
        for _ in range(args.rounds):  # layouts interleaved, so drift in the machine hits each alike
            for label, ranks, threads in LAYOUTS:
                results[label].append(run_round(shape, ranks, threads, args))
        for label, ranks, _ in LAYOUTS:
            rounds = results[label]
            best = max(rounds, key=lambda r: r["tokens_per_s"])
            median = statistics.median(r["tokens_per_s"] for r in rounds)
            share = f"{best['collective_share']:.1%}" if ranks > 1 else "-"
            print(f"{shape:<17} {label:<22} {best['tokens_per_s']:>13,.0f} {median:>9,.0f} {share:>16}")


if __name__ == "__main__":
    main()
