"""CPU training throughput: microgpt's NumPy backend against eager PyTorch, same model, same data.

Two cases of the reference default shape (d 64, 2 layers, 4 heads of 16, d_ff
256, T 128, vocab 65): B=1 and B=16. Both frameworks start from the same
weights (ours, copied into TorchGPT) and train on the same windows with Adam.
Each round runs warm-up steps and then times --steps steps; the rounds
alternate between the two so drift in the machine hits both alike. The best
round counts, and the median round is printed too (a VM's speed drifts). The
loss is read back every step on both sides (ours returns it; torch calls
.item()), and the last losses should agree closely: same start, same data.

    python3 benchmarks/bench_cpu.py            # full run
    python3 benchmarks/bench_cpu.py --quick    # a few seconds

Data: tinyshakespeare from ../shared/data/tinyshakespeare.txt (relative to the
repo root) when it is there, otherwise random token ids. PyTorch is optional:
without it, ours runs alone. The thread count (--threads, default the CPU count)
goes to torch.set_num_threads and, where threadpoolctl is installed, to NumPy's
BLAS; the BLAS in use and its settings are printed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

from microgpt.backends import get_backend
from microgpt.config import ModelConfig
from microgpt.model.gpt import GPT

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling modules below
from corpus import load_tokens

VOCAB_SIZE = 65
SEQ_LEN = 128
BATCH_SIZES = (1, 16)
LR = 3e-4
SEED = 0
# The issue's figures for PyTorch 2.13 CPU eager on this 2-core machine, tokens/s.
ISSUE_TORCH_TOKENS_PER_S = {1: 9_000, 16: 26_000}
BLAS_ENV_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")

try:
    import torch

    from torch_gpt import TorchGPT, load_from_microgpt, make_adam, train_step

    TORCH_ERROR = None
except ImportError as exc:
    TORCH_ERROR = str(exc)

try:
    import threadpoolctl
except ImportError:
    threadpoolctl = None


def model_config() -> ModelConfig:
    return ModelConfig(
        vocab_size=VOCAB_SIZE, d_model=64, n_layers=2, head_dims=(16,) * 4, d_ff=256, seq_len=SEQ_LEN
    )


def sample_windows(tokens: np.ndarray, batch: int, count: int) -> list[np.ndarray]:
    """count batches of random windows, each (batch, SEQ_LEN + 1)."""
    rng = np.random.default_rng(SEED + batch)
    starts = rng.integers(0, len(tokens) - SEQ_LEN - 1, size=(count, batch))  # (count, batch)
    offsets = np.arange(SEQ_LEN + 1)  # (T+1,)
    return [tokens[row[:, None] + offsets[None, :]] for row in starts]


class OursTrainer:
    name = "microgpt numpy"

    def __init__(self):
        self.model = GPT(model_config(), get_backend("numpy"), seed=SEED)

    def step(self, windows: np.ndarray) -> float:
        return self.model.train_step(windows, LR)


class TorchTrainer:
    name = "torch eager"

    def __init__(self):
        c = model_config()
        self.model = TorchGPT(c.vocab_size, c.d_model, c.n_layers, c.head_dims, c.d_ff, c.seq_len)
        load_from_microgpt(self.model, GPT(c, get_backend("numpy"), seed=SEED).params.to_host())
        self.optimizer = make_adam(self.model, LR)

    def step(self, windows: np.ndarray) -> float:
        return train_step(self.model, self.optimizer, torch.from_numpy(windows))


def time_round(trainer, batches: list[np.ndarray], warmup: int) -> tuple[float, float]:
    """(seconds for the timed steps, last loss): the first `warmup` batches are not timed."""
    for windows in batches[:warmup]:
        trainer.step(windows)
    start = time.perf_counter()
    for windows in batches[warmup:]:
        loss = trainer.step(windows)
    return time.perf_counter() - start, loss


def bench_case(batch: int, tokens: np.ndarray, args) -> dict[str, float]:
    """Best-round tokens/s per framework for one batch size; prints a line each (with the median round)."""
    trainer_classes = [OursTrainer] + ([TorchTrainer] if TORCH_ERROR is None else [])
    trainers = [cls() for cls in trainer_classes]
    round_seconds: dict[str, list[float]] = {t.name: [] for t in trainers}
    losses = {}
    for round_index in range(args.rounds):
        batches = sample_windows(tokens, batch, args.warmup + args.steps)
        for trainer in trainers if round_index % 2 == 0 else reversed(trainers):
            seconds, losses[trainer.name] = time_round(trainer, batches, args.warmup)
            round_seconds[trainer.name].append(seconds)
    rates = {}
    tokens_per_round = batch * SEQ_LEN * args.steps
    for name, seconds in round_seconds.items():
        rates[name] = tokens_per_round / min(seconds)
        median_rate = tokens_per_round / float(np.median(seconds))
        print(
            f"  B={batch:<3} {name:15s} {rates[name]:>10,.0f} tok/s (median round {median_rate:>7,.0f})  "
            f"{1000 * min(seconds) / args.steps:7.2f} ms/step  loss {losses[name]:.4f}"
        )
    return rates


def describe_blas(threads: int) -> None:
    config = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    print(f"numpy {np.__version__}, BLAS {config.get('name')} {config.get('version')}")
    env = ", ".join(f"{var}={os.environ[var]}" for var in BLAS_ENV_VARS if var in os.environ) or "none set"
    print(f"BLAS environment: {env}")
    if threadpoolctl is None:
        print(
            "threadpoolctl is not installed: NumPy's BLAS keeps its own thread count (see the variables above)"
        )
        return
    for pool in threadpoolctl.threadpool_info():
        if pool["user_api"] == "blas":
            print(
                f"BLAS pool: {pool['internal_api']} {pool['version']}, {pool['num_threads']} threads by default, "
                f"core type {pool.get('architecture')}, threading {pool.get('threading_layer')}"
            )
    print(f"NumPy's BLAS is limited to {threads} threads for the run (threadpoolctl)")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=50, help="timed steps per round (default 50)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps before each round (default 5)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per framework; the best counts")
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="threads for torch and BLAS")
    parser.add_argument("--quick", action="store_true", help="5 timed steps, 2 warm-up, 1 round")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.warmup, args.rounds = 5, 2, 1
    if min(args.steps, args.rounds, args.threads) < 1 or args.warmup < 0:
        parser.error("--steps, --rounds and --threads must be at least 1, --warmup at least 0")
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    tokens, source = load_tokens(VOCAB_SIZE, SEED, n_random=1_000_000)
    print(f"data: {source}")
    print(f"model: {model_config()}")
    print(
        f"load average before the run: {os.getloadavg()[0]:.2f} (other processes on the CPUs skew the figures)"
    )
    print(
        f"timing: {args.steps} steps after {args.warmup} warm-up, best of {args.rounds} rounds, {args.threads} threads"
    )
    describe_blas(args.threads)
    if TORCH_ERROR is None:
        torch.set_num_threads(args.threads)
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    else:
        print(f"torch is not importable ({TORCH_ERROR}): timing microgpt alone")
    limit = threadpoolctl.threadpool_limits(args.threads) if threadpoolctl is not None else None
    try:
        for batch in BATCH_SIZES:
            rates = bench_case(batch, tokens, args)
            if TORCH_ERROR is None:
                ratio = rates[OursTrainer.name] / rates[TorchTrainer.name]
                print(
                    f"  B={batch:<3} ours/torch = {ratio:.2f}   (issue's torch figure: {ISSUE_TORCH_TOKENS_PER_S[batch]:,} tok/s)"
                )
    finally:
        if limit is not None:
            limit.restore_original_limits()


if __name__ == "__main__":
    main()
