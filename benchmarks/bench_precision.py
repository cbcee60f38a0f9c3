"""bf16 against fp32 on the CPU: what each learns, how fast a step runs, and what share of the machine's peak.

Learning: the default run (`microgpt train`'s shape and settings) and the d128
run, trained --steps steps on tinyshakespeare (char tokens) on the cpu backend,
at fp32 and at bf16 from the same 3 seeds (a precision's spread: how far the seed
alone moves the result); each run's validation loss on the same held-out tokens
at its end, the two spreads side by side, bf16's mean against fp32's, and how
many of bf16's seeds lie within fp32's spread (widened by nothing). With
--order-control, fp32 is trained from the same seeds on the other BLAS too: its
float32 products add in another order, and how far that alone moves each seed's
loss is the yardstick for how far bf16 moves it.

Speed: whole training runs through `microgpt.train`, tokens/s, the median of
--rounds rounds with the variants alternating, side by side: microgpt fp32 on
OpenBLAS and on MKL (`MICROGPT_BLAS`, where MKL is installed), microgpt bf16
(MKL's bf16 products), eager PyTorch fp32 and eager PyTorch under
`torch.autocast("cpu", dtype=torch.bfloat16)` (benchmarks/torch_gpt.py, the
fused model, Adam; where torch imports). Shapes (vocab 65):

    default  d 96, 4 layers, 4 heads, d_ff 384,  T 64,  B 12
    d128     d 128, 4 layers, 4 heads, d_ff 512, T 64,  B 12
    d256     d 256, 4 layers, 4 heads, d_ff 1024, T 128, B 8   (not with --quick)
    d384     d 384, 6 layers, 6 heads, d_ff 1536, T 128, B 8   (not with --quick)

Peak: the best rate of a 1024 x 1024 x 1024 product on one thread, in the same
process: OpenBLAS fp32 (NumPy), MKL fp32 (`cblas_sgemm`) and MKL bf16
(`cblas_gemm_bf16bf16f32` on inputs rounded beforehand). A step's share is its
products' FLOPs (forward and backward, causal attention counted at half) over
the step's whole time, against the peak of its library times the threads: a
lower bound on the products' own share, since the step's time includes
everything between them. Then one more run of each variant with every product
clocked (benchmarks/product_clock.py): the products' share of the threads' time,
what of it is rounding to bf16 (and copies) outside MKL, and the BLAS's own rate
in them against its 1024^3 peak.

    python benchmarks/bench_precision.py --quick   # about 3 minutes on 2 cores
    python benchmarks/bench_precision.py           # 600 steps a run, four shapes: about 20 minutes on 2 cores
    python benchmarks/bench_precision.py --only learning   # (or speed) one of the two parts

The text is read from ../shared/data/tinyshakespeare.txt (beside the checkout), never copied into it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling modules below

from bench_bf16 import ours, text_file, torch_rate  # sibling modules, importable once the line above has run
from bench_cpu import Case, _config, step_flops
from microgpt.backends import blas, mkl_bf16
from microgpt.core import machine
from microgpt.core.threads import available_cores
from product_clock import ProductClock

SHAPES = {  # name -> (microgpt.train's settings, batch, the config FLOPs are counted on)
    "default": ({}, 12, _config(96, 4, 4, 384, 64)),
    "d128": ({"d_model": 128, "n_layers": 4, "heads": "4", "d_ff": 512, "seq_len": 64}, 12,
             _config(128, 4, 4, 512, 64)),
    "d256": ({"d_model": 256, "n_layers": 4, "heads": "4", "d_ff": 1024, "seq_len": 128}, 8,
             _config(256, 4, 4, 1024, 128)),
    "d384": ({"d_model": 384, "n_layers": 6, "heads": "6", "d_ff": 1536, "seq_len": 128}, 8,
             _config(384, 6, 6, 1536, 128)),
}
SEEDS = (1, 2, 3)
PEAK_SIZE = 1024


def peaks() -> dict[str, float]:
    """GFLOP/s of a PEAK_SIZE^3 product on one thread, best of 5: OpenBLAS fp32, MKL fp32, MKL bf16."""
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((PEAK_SIZE, PEAK_SIZE), dtype=np.float32) for _ in range(2))
    out = np.empty_like(a)
    products = {"OpenBLAS fp32": lambda: np.matmul(a, b, out=out)}
    if mkl_bf16.mkl_library_path() is not None:
        a_bits, b_bits = mkl_bf16.bf16_bits(a), mkl_bf16.bf16_bits(b)
        products["MKL fp32"] = lambda: mkl_bf16.sgemm(a, b, out)
        if mkl_bf16.unavailable() is None:
            products["MKL bf16"] = lambda: mkl_bf16.gemm_bits(a_bits, b_bits, out)
    rates = {}
    with threadpool_limits(limits=1, user_api="blas"):
        for name, product in products.items():
            product()
            best = float("inf")
            for _ in range(5):
                start = time.perf_counter()
                product()
                best = min(best, time.perf_counter() - start)
            rates[name] = 2.0 * PEAK_SIZE**3 / best / 1e9
    return rates


@contextlib.contextmanager
def blas_set(name: str | None):
    """MICROGPT_BLAS set to name (None: as it was) while the block runs."""
    before = os.environ.get(blas.ENV)
    if name is not None:
        os.environ[blas.ENV] = name
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(blas.ENV, None)
        else:
            os.environ[blas.ENV] = before


def learning(path: Path, args) -> None:
    missing = mkl_bf16.unavailable()
    print(f"\nvalidation loss after {args.steps} steps ({args.val_tokens:,} held-out tokens), cpu backend, "
          f"fp32 on {blas.NAMES[blas.choose()]}, fp32 and bf16 each from seeds {', '.join(map(str, SEEDS))}")
    seeds = " | ".join(f"{{}} seed {seed}" for seed in SEEDS)
    print(f"| run | {seeds.format(*['fp32'] * len(SEEDS))} | fp32 spread | {seeds.format(*['bf16'] * len(SEEDS))} | "
          "bf16 spread | bf16 - fp32, mean of the seeds | bf16 seeds within fp32's spread |")
    print("| --- |" + " ---: |" * (2 * len(SEEDS) + 4))
    other = "mkl" if blas.choose() == "openblas" else "openblas"  # --order-control's fp32 runs multiply on it
    if args.order_control and mkl_bf16.mkl_library_path() is None:
        print("--order-control: MKL is not installed, so there is no other BLAS to add float32 in another order")
        args.order_control = False
    controls = []  # (run, bf16's losses, fp32's, fp32's on the other BLAS) for --order-control
    for name in args.learning:
        settings, batch, _ = SHAPES[name]
        run = {"val_tokens": args.val_tokens, "eval_every": args.steps, **settings}
        fp32 = [ours(path, run, batch, "fp32", args.steps, args.threads, seed=seed)[2] for seed in SEEDS]
        cells = [*(f"{v:.4f}" for v in fp32), spread(fp32)]
        if missing:
            cells += ["not run"] * len(SEEDS) + ["", "", ""]
        else:
            bf16 = [ours(path, run, batch, "bf16", args.steps, args.threads, seed=seed)[2] for seed in SEEDS]
            inside = sum(min(fp32) <= v <= max(fp32) for v in bf16)
            cells += [*(f"{v:.4f}" for v in bf16), spread(bf16), f"{np.mean(bf16) - np.mean(fp32):+.4f}",
                      f"{inside} of {len(SEEDS)}"]
            if args.order_control:
                with blas_set(other):
                    reordered = [ours(path, run, batch, "fp32", args.steps, args.threads, seed=seed)[2]
                                 for seed in SEEDS]
                controls.append((f"{name} (B {batch})", bf16, fp32, reordered))
        print(f"| {name} (B {batch}) | " + " | ".join(cells) + " |", flush=True)
    if missing:
        print(f"bf16: {missing}")
    if controls:
        print(f"\nthe same seed moved by bf16, and by fp32's products on {blas.NAMES[other]} instead (float32 "
              "added in another order): validation loss less fp32's")
        print("| run | " + " | ".join(f"bf16, seed {seed}" for seed in SEEDS) + " | " +
              " | ".join(f"fp32 {blas.NAMES[other]}, seed {seed}" for seed in SEEDS) +
              " | mean size, bf16 | mean size, other order |")
        print("| --- |" + " ---: |" * (2 * len(SEEDS) + 2))
        for label, bf16, fp32, reordered in controls:
            moved = [np.subtract(bf16, fp32), np.subtract(reordered, fp32)]
            print(f"| {label} | " + " | ".join(f"{d:+.4f}" for d in np.concatenate(moved)) + " | " +
                  " | ".join(f"{np.abs(d).mean():.4f}" for d in moved) + " |", flush=True)


def spread(losses: list[float]) -> str:
    """'low to high (width)' of the losses."""
    return f"{min(losses):.4f} to {max(losses):.4f} ({max(losses) - min(losses):.4f})"


def speed(path: Path, args, peak: dict[str, float]) -> None:
    variants = [("fp32", "openblas")] + ([("fp32", "mkl")] if "MKL fp32" in peak else []) + \
        ([("bf16", None)] if "MKL bf16" in peak else [])
    try:
        import torch

        torch.set_num_threads(args.threads)
        torch_columns = ("torch fp32", "torch autocast bf16")
    except ImportError:
        torch_columns = ()
    labels = [f"{precision} {blas.NAMES[lib] if lib else 'MKL'}" for precision, lib in variants]
    clocked = []  # (shape, variant, its library's peak, seconds, steps, ProductClock) of the clocked runs
    print(f"\ntokens/s, median of {args.rounds} rounds of {args.speed_steps} steps (a quarter at d256 and d384); "
          f"in brackets the products' share of {args.threads} threads' peak")
    print("| shape | B | " + " | ".join([*labels, *torch_columns]) + " |")
    print("| --- | ---: |" + " ---: |" * (len(labels) + len(torch_columns)))
    for name in args.speed:
        settings, batch, config = SHAPES[name]
        steps = args.speed_steps if name in ("default", "d128") else max(2, args.speed_steps // 4)
        flops_per_token = step_flops(Case(name, config, batch)) / (batch * config.seq_len)
        ours(path, settings, batch, "fp32", 2, args.threads)  # warm: numba's kernels compiled, the text cached
        rates: dict[int, list[float]] = {i: [] for i in range(len(variants))}
        for round_index in range(args.rounds):
            order = range(len(variants)) if round_index % 2 == 0 else reversed(range(len(variants)))
            for i in order:
                precision, lib = variants[i]
                with blas_set(lib):
                    rates[i].append(ours(path, settings, batch, precision, steps, args.threads)[0])
        cells = []
        for i, (precision, lib) in enumerate(variants):
            rate = float(np.median(rates[i]))
            cells.append(f"{rate:,.0f} ({flops_per_token * rate / 1e9 / (peak_of(peak, precision, lib) * args.threads):.0%})")
        for autocast in (False, True)[:len(torch_columns)]:
            torch_rates = [torch_rate(path, settings_for_torch(name), batch, steps, autocast) for _ in range(args.rounds)]
            cells.append(f"{np.median(torch_rates):,.0f}")
        print(f"| {name} | {batch} | " + " | ".join(cells) + " |", flush=True)
        for precision, lib in variants:  # one more run of each, its products clocked
            with blas_set(lib), ProductClock() as clock:
                rate = ours(path, settings, batch, precision, steps, args.threads)[0]
            clocked.append((name, f"{precision} {blas.NAMES[lib] if lib else 'MKL'}", peak_of(peak, precision, lib),
                            steps * batch * config.seq_len / rate, steps, clock))
    print_clocked(clocked, args.threads)


def peak_of(peak: dict[str, float], precision: str, lib: str | None) -> float:
    """The one-thread 1024^3 rate (GFLOP/s) of the library a variant multiplies with."""
    return peak["MKL bf16" if precision == "bf16" else f"{blas.NAMES[lib]} fp32"]


def print_clocked(clocked: list, threads: int) -> None:
    """Where the time goes, from the clocked runs: the products' share of the threads' time, what of it is
    rounding, and the products' own rate against the peak."""
    print(f"\nwhere the time goes: one more run of each, every product clocked (ProductClock), {threads} threads")
    print("| shape | precision, BLAS | ms/step | product GFLOP/step (as run) | products' share of the threads' time "
          "| of it, rounding and copies outside the BLAS | the BLAS's GFLOP/s a thread | that / 1-thread peak "
          f"| the step's products / {threads} threads' peak |")
    print("| --- | --- |" + " ---: |" * 7)
    for name, label, library_peak, seconds, steps, clock in clocked:
        thread_seconds = seconds * threads
        mkl = "MKL" in label  # MKL's own seconds are clocked apart from the rounding around them; OpenBLAS's are all
        rate = clock.flops / (clock.library_seconds if mkl else clock.product_seconds) / 1e9  # a thread, in the BLAS
        rounding = (clock.product_seconds - clock.library_seconds) / thread_seconds if mkl else None
        print(f"| {name} | {label} | {1000 * seconds / steps:.1f} | {clock.flops / steps / 1e9:.3f} | "
              f"{clock.product_seconds / thread_seconds:.0%} | {'' if rounding is None else f'{rounding:.0%}'} | "
              f"{rate:.0f} | {rate / library_peak:.0%} | {clock.flops / seconds / 1e9 / (library_peak * threads):.0%} |",
              flush=True)


def settings_for_torch(name: str) -> dict:
    """The shape as torch_rate reads it (d_model, n_layers, heads as a list of widths, d_ff, seq_len)."""
    config = SHAPES[name][2]
    return {"d_model": config.d_model, "n_layers": config.n_layers, "d_ff": config.d_ff, "seq_len": config.seq_len,
            "heads": ",".join(str(w) for w in config.head_dims)}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=available_cores())
    parser.add_argument("--steps", type=int, help="training steps of each learning run (default 600; quick 150)")
    parser.add_argument("--val-tokens", type=int, help="held-out tokens each run validates on (20,000; quick 10,000)")
    parser.add_argument("--speed-steps", type=int, help="timed steps a round, a quarter at d256 and d384 (20; quick 8)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="shorter runs, the default and d128 shapes only")
    parser.add_argument("--text", type=Path, help="the text (default: ../shared/data/tinyshakespeare.txt)")
    parser.add_argument("--order-control", action="store_true",
                        help="also train fp32 from the same seeds on the other BLAS (OpenBLAS or MKL): how far a "
                             "change in the order of float32's additions alone moves each seed's result, beside "
                             "how far bf16 moves it")
    parser.add_argument("--only", choices=("learning", "speed"), help="run one part (default: both)")
    parser.add_argument("--shapes", nargs="+", choices=tuple(SHAPES),
                        help="these shapes only (default: default and d128 for learning, all four for speed)")
    args = parser.parse_args(argv)
    defaults = (150, 10_000, 8) if args.quick else (600, 20_000, 20)
    args.steps, args.val_tokens, args.speed_steps = (given if given is not None else default for given, default in
                                                     zip((args.steps, args.val_tokens, args.speed_steps), defaults))
    args.learning, args.speed = ("default", "d128"), ("default", "d128") if args.quick else tuple(SHAPES)
    if args.shapes:
        args.learning = args.speed = tuple(args.shapes)
    path = args.text or text_file()
    flags = mkl_bf16.cpu_flags()
    features = ", ".join(f for f in ("amx_bf16", "avx512_bf16", "avx512f") if f in flags) or "none of AMX, AVX-512"
    print(f"bench_precision: {machine.describe()}; {args.threads} threads; cpu features: {features}; "
          f"MKL: {mkl_bf16.mkl_library_path() or 'not installed'}; text {path}")
    if args.only != "learning":
        peak = peaks()
        print(f"peak, one thread, {PEAK_SIZE}^3: " +
              ", ".join(f"{name} {rate:,.0f} GFLOP/s" for name, rate in peak.items()))
        speed(path, args, peak)
        print("peak again after the speed runs (the table used the one before): " +
              ", ".join(f"{name} {rate:,.0f} GFLOP/s" for name, rate in peaks().items()))
    if args.only != "speed":
        learning(path, args)
    print(f"\nafter: {machine.describe()}")


if __name__ == "__main__":
    main()
