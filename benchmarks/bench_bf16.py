"""--precision bf16 against fp32 on the CPU: training throughput side by side, and the loss curves they follow.

Throughput: whole training runs through `microgpt.train` (the trainer as a user
runs it: the cpu backend, its streams, Adam), at fp32 and at bf16, on
tinyshakespeare (char tokens, vocab 65), in one process, the precisions
alternating round by round so the machine's drift hits both alike; the median of
the rounds counts. Two shapes:

    d128   d 128, 4 layers, 4 heads, d_ff 512,  T 64,  B 12
    d384   d 384, 6 layers, 6 heads, d_ff 1536, T 128, B 8

Where PyTorch imports, eager torch (benchmarks/torch_gpt.py, Adam) runs the same
shapes in float32 and under `torch.autocast("cpu", dtype=torch.bfloat16)`.

Loss curves: the d128 shape trained --curve-steps steps (default 300) from the
same seed at fp32 and bf16, with validation on the held-out tail; printed as the
mean training loss of each 50 steps side by side, and both validation losses.

    python benchmarks/bench_bf16.py                # about 3 minutes on 2 cores
    python benchmarks/bench_bf16.py --quick        # a few steps a case, no curves

bf16 on cpu needs the mkl extra and AMX-BF16 or AVX512-BF16; where either is
missing the bf16 rows say why. The text is read from ../shared/data/tinyshakespeare.txt
(beside the checkout); never copied into it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

import microgpt
from microgpt.backends import mkl_bf16
from microgpt.core.threads import available_cores

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling modules below

from corpus import CANDIDATES  # a sibling module, importable once the line above has run

SHAPES = {  # name -> (settings, batch)
    "d128": ({"d_model": 128, "n_layers": 4, "heads": "32,32,32,32", "d_ff": 512, "seq_len": 64}, 12),
    "d384": ({"d_model": 384, "n_layers": 6, "heads": "64,64,64,64,64,64", "d_ff": 1536, "seq_len": 128}, 8),
}
SEED = 7


def text_file() -> Path:
    for path in CANDIDATES:
        if path.is_file():
            return path
    sys.exit("bench_bf16: needs tinyshakespeare.txt under ../shared/data/ (beside the checkout)")


def ours(path: Path, shape: dict, batch: int, precision: str, steps: int, threads: int, **extra):
    """(tokens/s, losses, validation loss) of one training run on the cpu backend (seed SEED unless `extra`
    gives one)."""
    _, summary = microgpt.train(str(path), steps=steps, batch_size=batch, backend="cpu", threads=threads,
                                precision=precision, save=False, gen=0, **{"val_tokens": 0, "seed": SEED, **shape,
                                                                           **extra})
    return summary.tokens_per_sec, summary.losses, summary.val_loss


def torch_rate(path: Path, shape: dict, batch: int, steps: int, autocast: bool) -> float:
    """tokens/s of eager PyTorch training the same shape on random windows of the text, fp32 or autocast bf16."""
    import torch

    from torch_gpt import TorchGPT, make_adam, train_step

    text = path.read_text(encoding="utf-8")
    index = {c: i for i, c in enumerate(sorted(set(text)))}
    ids = np.fromiter((index[c] for c in text), dtype=np.int64, count=len(text))  # (n,)
    t = shape["seq_len"]
    width = shape["d_model"] // len(shape["heads"].split(","))
    model = TorchGPT(len(index), shape["d_model"], shape["n_layers"], (width,) * len(shape["heads"].split(",")),
                     shape["d_ff"], t, fused_qkv=True)
    optimizer = make_adam(model, 3e-3, fused=True)
    rng = np.random.default_rng(SEED)
    batches = [torch.from_numpy(ids[rng.integers(0, len(ids) - t - 1, size=batch)[:, None] + np.arange(t + 1)])
               for _ in range(steps + 2)]
    context = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if autocast else _no_context
    for windows in batches[:2]:  # warm-up
        with context():
            train_step(model, optimizer, windows)
    start = time.perf_counter()
    for windows in batches[2:]:
        with context():
            train_step(model, optimizer, windows)
    return steps * batch * t / (time.perf_counter() - start)


class _no_context:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def throughput(path: Path, args) -> None:
    missing = mkl_bf16.unavailable()
    try:
        import torch

        torch.set_num_threads(args.threads)
        has_torch = True
    except ImportError:
        has_torch = False
    print(f"{'shape':6s} {'B':>3s} {'cpu fp32':>10s} {'cpu bf16':>10s} {'bf16/fp32':>9s}"
          + (f" {'torch fp32':>11s} {'torch bf16':>11s}" if has_torch else "") + "   tokens/s, median of rounds")
    for name, (shape, batch) in SHAPES.items():
        steps = args.steps if name == "d128" else max(2, args.steps // 4)
        rates: dict[str, list[float]] = {"fp32": [], "bf16": []}
        ours(path, shape, batch, "fp32", 2, args.threads)  # warm: numba's kernels compiled, the text cached
        for round_index in range(args.rounds):
            order = ("fp32", "bf16") if round_index % 2 == 0 else ("bf16", "fp32")
            for precision in order:
                if precision == "bf16" and missing:
                    continue
                rates[precision].append(ours(path, shape, batch, precision, steps, args.threads)[0])
        fp32 = float(np.median(rates["fp32"]))
        bf16 = float(np.median(rates["bf16"])) if rates["bf16"] else float("nan")
        line = f"{name:6s} {batch:3d} {fp32:10,.0f} {bf16:10,.0f} {bf16 / fp32:8.2f}x"
        if has_torch:
            for autocast in (False, True):
                rate = np.median([torch_rate(path, shape, batch, steps, autocast) for _ in range(args.rounds)])
                line += f" {rate:11,.0f}"
        print(line, flush=True)
    if missing:
        print(f"cpu bf16: {missing}")


def curves(path: Path, args) -> None:
    shape, batch = SHAPES["d128"]
    print(f"\nloss curves: d128 B{batch}, {args.curve_steps} steps, seed {SEED}, cpu backend; mean training loss "
          "of each 50 steps")
    runs, missing = {}, mkl_bf16.unavailable()
    for precision in ("fp32", "bf16"):
        if precision == "bf16" and missing:
            print(f"bf16: {missing}")
            continue
        _, losses, val = ours(path, shape, batch, precision, args.curve_steps, args.threads,
                              val_tokens=20_000, eval_every=args.curve_steps)
        runs[precision] = (np.array(losses), val)
    print(f"{'steps':>9s} " + " ".join(f"{p:>8s}" for p in runs) + ("   bf16 - fp32" if len(runs) == 2 else ""))
    for start in range(0, args.curve_steps - 49, 50):
        means = [float(curve[start:start + 50].mean()) for curve, _ in runs.values()]
        diff = f"   {means[1] - means[0]:+.4f}" if len(means) == 2 else ""
        print(f"{start + 1:4d}-{start + 50:<4d} " + " ".join(f"{m:8.4f}" for m in means) + diff)
    print(f"{'val loss':>9s} " + " ".join(f"{val:8.4f}" for _, val in runs.values()))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=available_cores())
    parser.add_argument("--steps", type=int, default=20, help="timed steps a round at d128 (a quarter at d384)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--curve-steps", type=int, default=300)
    parser.add_argument("--quick", action="store_true", help="4 steps a round, 1 round, no loss curves")
    parser.add_argument("--text", type=Path, help="the text (default: ../shared/data/tinyshakespeare.txt)")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.rounds, args.curve_steps = 4, 1, 0
    path = args.text or text_file()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"bench_bf16: {cpu_model()}, {args.threads} threads, load average {load:.1f}; text {path}; "
          f"bf16 on cpu: {mkl_bf16.unavailable() or 'MKL ' + str(mkl_bf16.mkl_library_path())}")
    throughput(path, args)
    if args.curve_steps >= 50:
        curves(path, args)
    print(f"load average after: {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else "")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return "an unknown CPU"


if __name__ == "__main__":
    main()
