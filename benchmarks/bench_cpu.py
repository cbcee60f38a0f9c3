"""CPU training throughput: microgpt's cpu backend (numba kernels), its numpy backend and eager PyTorch.

Four cases, each a model shape and a batch size (vocab 65 everywhere):

    reference  d 64, 2 layers, 4 heads, d_ff 256, T 128    B=1 and B=16
    d128       d 128, 4 layers, 4 heads, d_ff 512, T 64    B=12
    d384       d 384, 6 layers, 6 heads, d_ff 1536, T 256  B=8

All start from the same weights (ours, copied into TorchGPT) and train on the
same windows with Adam. PyTorch runs twice: eager as torch_gpt.py writes it by
default (separate q, k, v products, Adam's defaults), and fused, the strongest
eager model a user writes (one q, k, v product, q and k rotated in one call,
SDPA, torch.optim.Adam(fused=True)); the faster of the two is the table's torch.
Each round runs warm-up steps and then times --steps steps; the order of the
frameworks rotates from round to round so drift in the machine hits each alike.
The median round counts (3 rounds at least make a median), the best is printed
too. The loss is read back every step on all sides.
The table at the end gives tokens/s and the ratios cpu/torch and cpu/numpy, and
the GEMM-bound limit: the step's matrix-product FLOPs (6 per parameter of the
dense layers per token, and 6 T^2 d per layer and sequence for causal
attention) divided by the best sgemm rate measured here (a 1024^3 float32
product through NumPy's BLAS, with the run's threads, before and after the
cases): no step can beat it.
`--one-pass` also times the cpu backend running each batch in one pass with BLAS
on every thread (its `streams` set to 1), to show what a slice of the batch per thread gains.

The CPU model (lscpu), the SIMD level and LLVM's target CPU are printed beside
the figures. The thread count (--threads, default every core) goes to torch and,
through microgpt.core.threads.set_threads, to BLAS and numba. `--memory` also measures
the peak resident memory of a training step at T=1024 (reference shape, B=1),
one fresh process per backend; `--startup` the time from a fresh interpreter to
the end of the first training step on cpu, cold (an empty kernel cache) and warm.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_cpu.py
    python benchmarks/bench_cpu.py --quick     # a few seconds a case

Data: tinyshakespeare from ../shared/data/tinyshakespeare.txt (relative to the
repo root) when it is there, otherwise random token ids. PyTorch is optional.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from microgpt.backends import get_backend
from microgpt.core.threads import available_cores, set_threads
from microgpt.model.gpt import GPT, GPTConfig
from microgpt.model.thread_split import ThreadSplit

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling modules below
from corpus import load_tokens

VOCAB_SIZE = 65
LR = 3e-4
SEED = 0

try:
    import torch

    from torch_gpt import TorchGPT, load_from_microgpt, make_adam, train_step

    TORCH_ERROR = None
except ImportError as exc:
    TORCH_ERROR = str(exc)


@dataclass(frozen=True)
class Case:
    name: str
    config: GPTConfig
    batch: int


def _config(d: int, layers: int, heads: int, d_ff: int, seq_len: int) -> GPTConfig:
    return GPTConfig(VOCAB_SIZE, d, layers, (d // heads,) * heads, d_ff, seq_len)


REFERENCE = _config(64, 2, 4, 256, 128)
CASES = [
    Case("reference", REFERENCE, 1),
    Case("reference", REFERENCE, 16),
    Case("d128", _config(128, 4, 4, 512, 64), 12),
    Case("d384", _config(384, 6, 6, 1536, 256), 8),
]


def sample_windows(tokens: np.ndarray, case: Case, count: int, round_index: int) -> list[np.ndarray]:
    """count batches of random windows, each (batch, seq_len + 1)."""
    seq_len = case.config.seq_len
    rng = np.random.default_rng([SEED, case.batch, round_index])
    starts = rng.integers(0, len(tokens) - seq_len - 1, size=(count, case.batch))  # (count, batch)
    offsets = np.arange(seq_len + 1)  # (T+1,)
    return [tokens[row[:, None] + offsets[None, :]] for row in starts]


class OursTrainer:
    def __init__(self, backend: str, config: GPTConfig, threads: int, one_pass: bool = False):
        self.name = f"microgpt {backend}" + (" 1 pass" if one_pass else "")
        options = {"threads": threads} if backend == "cpu" else {}
        self.model = GPT(config, get_backend(backend, **options), seed=SEED)
        if one_pass:  # the batch in one pass with BLAS on every thread, not a slice per thread
            self.model.be.streams = 1
        self.split = ThreadSplit(self.model)  # the batch over the backend's threads, as the trainer runs it

    def step(self, windows: np.ndarray) -> float:
        """One training step as the trainer takes it: the batch over the threads, then the reference's Adam."""
        self.model.params.zero_grad()
        loss, _ = self.split.loss_and_backward(windows)
        self.model.params.adam_step(LR)
        return loss


class TorchTrainer:
    """Eager PyTorch from our weights: `fused` is the strongest a user writes (one q, k, v product, one RoPE
    call for q and k, SDPA, torch.optim.Adam(fused=True)); else separate projections and Adam's defaults."""
    NAMES = ("torch eager", "torch fused")

    def __init__(self, config: GPTConfig, fused: bool):
        c = config
        self.name = self.NAMES[fused]
        self.model = TorchGPT(c.vocab_size, c.d_model, c.n_layers, c.head_dims, c.d_ff, c.seq_len, fused_qkv=fused)
        load_from_microgpt(self.model, GPT(c, get_backend("numpy"), seed=SEED).params.to_host())
        self.optimizer = make_adam(self.model, LR, fused=fused)

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


def bench_case(case: Case, tokens: np.ndarray, args) -> dict[str, float]:
    """Median-round tokens/s per framework for one case; prints a line each (with the best round)."""
    trainers = [OursTrainer("cpu", case.config, args.threads), OursTrainer("numpy", case.config, args.threads)]
    if args.one_pass and args.threads > 1 and case.batch > 1:
        trainers.append(OursTrainer("cpu", case.config, args.threads, one_pass=True))
    if TORCH_ERROR is None:
        trainers += [TorchTrainer(case.config, fused=False), TorchTrainer(case.config, fused=True)]
    steps = args.steps if case.config.d_model < 256 else max(1, args.steps // 5)  # d384 steps are ~50x longer
    round_seconds: dict[str, list[float]] = {t.name: [] for t in trainers}
    losses = {}
    for round_index in range(args.rounds):
        batches = sample_windows(tokens, case, args.warmup + steps, round_index)
        shift = round_index % len(trainers)
        for trainer in trainers[shift:] + trainers[:shift]:
            seconds, losses[trainer.name] = time_round(trainer, batches, args.warmup)
            round_seconds[trainer.name].append(seconds)
    rates = {}
    tokens_per_round = case.batch * case.config.seq_len * steps
    for name, seconds in round_seconds.items():
        rates[name] = tokens_per_round / float(np.median(seconds))
        print(
            f"  {case.name:9s} B={case.batch:<3} {name:15s} {rates[name]:>10,.0f} tok/s "
            f"(best round {tokens_per_round / min(seconds):>8,.0f})  {1000 * float(np.median(seconds)) / steps:8.2f} "
            f"ms/step  loss {losses[name]:.4f}",
            flush=True,
        )
    return rates


def step_flops(case: Case) -> float:
    """Matrix-product FLOPs of one training step (forward 2, backward 4 per multiply-add)."""
    c, tokens = case.config, case.batch * case.config.seq_len
    dense = c.n_layers * (4 * c.d_model**2 + 2 * c.d_model * c.d_ff) + c.d_model * c.vocab_size
    attention = c.n_layers * case.batch * 6 * c.seq_len**2 * c.d_model  # causal: half of QK^T and PV
    return 6.0 * dense * tokens + attention


def sgemm_flops_per_s(size: int = 1024) -> float:
    """The best rate of a (size x size) @ (size x size) float32 product through NumPy's BLAS."""
    a = np.random.default_rng(0).standard_normal((size, size), dtype=np.float32)  # (size, size)
    best = float("inf")
    for _ in range(10):
        start = time.perf_counter()
        a @ a
        best = min(best, time.perf_counter() - start)
    return 2.0 * size**3 / best


def cpu_model_name() -> str:
    try:
        lines = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return platform.processor() or "unknown (no lscpu)"
    for line in lines:
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def simd_level() -> str:
    """The widest x86 vector extension the CPU reports, and LLVM's name for the CPU numba compiles for."""
    flags = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    level = next((name for flag, name in [("avx512f", "AVX-512"), ("avx2", "AVX2"), ("avx", "AVX"),
                                          ("sse4_2", "SSE4.2")] if flag in flags), "unknown")
    try:
        import llvmlite.binding as llvm

        return f"{level} (LLVM target CPU: {llvm.get_host_cpu_name()})"
    except ImportError:
        return level


def describe_machine(threads: int) -> None:
    print(f"CPU: {cpu_model_name()}, {available_cores()} cores; SIMD: {simd_level()}")
    config = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    env = ", ".join(f"{v}={os.environ[v]}" for v in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE") if v in os.environ)
    print(f"numpy {np.__version__}, BLAS {config.get('name')} {config.get('version')} ({env or 'no OPENBLAS_* set'})")
    import numba

    print(f"numba {numba.__version__}, threading layer {numba.threading_layer()}; {threads} threads for "
          "BLAS, numba and torch")
    if TORCH_ERROR is None:
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    else:
        print(f"torch is not importable ({TORCH_ERROR}): no PyTorch column")
    print(f"load average before the run: {os.getloadavg()[0]:.2f} (other processes on the CPUs skew the figures)")


def print_table(results: list[tuple[Case, dict[str, float]]], rate_before: float) -> None:
    rate = max(rate_before, sgemm_flops_per_s())  # this VM's speed drifts: the better of before and after
    print(f"\ntokens/s (median round); torch: the faster of eager and fused (e: eager, f: fused); GEMM-bound: tokens/s "
          f"if a step were only its products at the best sgemm rate measured here, {rate / 1e9:.0f} GFLOP/s")
    header = (f"  {'case':18s} {'cpu':>10s} {'numpy':>10s} {'torch':>12s} {'cpu/torch':>10s} {'cpu/numpy':>10s} "
              f"{'GFLOP/step':>11s} {'GEMM-bound':>11s} {'cpu/bound':>10s}")
    print(header)
    for case, rates in results:
        cpu, numpy_rate = rates["microgpt cpu"], rates["microgpt numpy"]
        torch_name = max(TorchTrainer.NAMES, key=lambda name: rates.get(name, 0.0))
        torch_rate = rates.get(torch_name)
        torch_cols = (f"{torch_rate:>10,.0f} {torch_name.split()[1][0]} {cpu / torch_rate:>10.2f}" if torch_rate
                      else f"{'-':>12s} {'-':>10s}")
        bound = case.batch * case.config.seq_len / (step_flops(case) / rate)  # tokens/s
        one_pass = rates.get("microgpt cpu 1 pass")
        one_pass_col = f"  (cpu in one pass: {one_pass:,.0f}, slices gain {cpu / one_pass:.2f}x)" if one_pass else ""
        print(f"  {case.name + ' B=' + str(case.batch):18s} {cpu:>10,.0f} {numpy_rate:>10,.0f} {torch_cols} "
              f"{cpu / numpy_rate:>10.2f} {step_flops(case) / 1e9:>11.2f} {bound:>11,.0f} {cpu / bound:>10.2f}"
              f"{one_pass_col}")


MEMORY_SCRIPT = """
import sys
import numpy as np
from microgpt.backends import get_backend
from microgpt.model.gpt import GPTConfig
from microgpt.model.gpt import GPT
def peak_kib():  # VmHWM: this process's peak resident set (ru_maxrss would include the parent's, kept over exec)
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM"))
backend = get_backend(sys.argv[1])  # numba and its compiled kernels are loaded here, before `before`
before = peak_kib()
model = GPT(GPTConfig(65, 64, 2, (16,) * 4, 256, 1024), backend, seed=0)
windows = np.random.default_rng(0).integers(0, 65, size=(1, 1025))  # (B, T+1)
for _ in range(2):
    model.train_step(windows, 3e-4)
print(before, peak_kib())
"""


def measure_memory() -> None:
    """Peak resident memory (VmHWM) of two training steps at T=1024, one fresh process per backend."""
    print("\npeak resident memory, reference shape at T=1024, B=1 (fresh process each)")
    for backend in ("cpu", "numpy"):
        done = subprocess.run([sys.executable, "-c", MEMORY_SCRIPT, backend], capture_output=True, text=True,
                              check=True)
        before, peak = (int(v) / 1024 for v in done.stdout.split())  # KiB -> MiB
        print(f"  {backend:6s} peak {peak:7.1f} MiB; the model and its steps add {peak - before:6.1f} MiB to the "
              f"{before:.1f} MiB of the interpreter, libraries and backend")


STARTUP_SCRIPT = """
import time
start = time.perf_counter()
import numpy as np
from microgpt.backends import get_backend
from microgpt.model.gpt import GPTConfig
from microgpt.model.gpt import GPT
model = GPT(GPTConfig(65, 64, 2, (16,) * 4, 256, 128), get_backend("cpu"), seed=0)
model.train_step(np.zeros((1, 129), dtype=np.int64), 3e-4)
print(time.perf_counter() - start)
"""


def measure_startup() -> None:
    """Seconds from a fresh interpreter to the end of the first cpu step: empty kernel cache, then warm."""
    import tempfile

    print("\nstart-up on cpu (fresh interpreter to the end of the first step, reference shape, B=1)")
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache}
        for label in ("cold (empty cache)", "warm (cached)", "warm (cached)"):
            done = subprocess.run([sys.executable, "-c", STARTUP_SCRIPT], capture_output=True, text=True,
                                  env=env, check=True)
            print(f"  {label:20s} {float(done.stdout):6.2f} s")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="timed steps per round (default 20; d384: a fifth)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps before each round (default 3)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per framework; the median counts")
    parser.add_argument("--threads", type=int, default=available_cores(), help="threads for BLAS, numba, torch")
    parser.add_argument("--cases", nargs="*", choices=sorted({c.name for c in CASES}),
                        help="only these shapes (none: only --memory / --startup)")
    parser.add_argument("--memory", action="store_true", help="also measure peak memory at T=1024")
    parser.add_argument("--startup", action="store_true", help="also measure cold and warm start-up")
    parser.add_argument("--quick", action="store_true", help="5 timed steps, 1 warm-up, 1 round")
    parser.add_argument("--one-pass", action="store_true",
                        help="also time the cpu backend without splitting the batch over threads")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.warmup, args.rounds = 5, 1, 1
    if min(args.steps, args.rounds, args.threads) < 1 or args.warmup < 0:
        parser.error("--steps, --rounds and --threads must be at least 1, --warmup at least 0")
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    set_threads(args.threads)
    if TORCH_ERROR is None:
        torch.set_num_threads(args.threads)
    tokens, source = load_tokens(VOCAB_SIZE, SEED, n_random=1_000_000)
    print(f"data: {source}")
    describe_machine(args.threads)
    print(f"timing: {args.steps} steps (d384: {max(1, args.steps // 5)}) after {args.warmup} warm-up, "
          f"the median of {args.rounds} rounds counts")
    cases = [c for c in CASES if args.cases is None or c.name in args.cases]
    rate_before = sgemm_flops_per_s()
    results = [(case, bench_case(case, tokens, args)) for case in cases]
    if results:
        print_table(results, rate_before)
    if args.memory:
        measure_memory()
    if args.startup:
        measure_startup()
    print(f"(peak RSS of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB)")


if __name__ == "__main__":
    main()
