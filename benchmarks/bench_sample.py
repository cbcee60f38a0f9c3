"""Sampling and exact eval on the CPU: microgpt's cpu and numpy backends against eager PyTorch, same weights.

Two model shapes: `microgpt train`'s default (d 96, 4 layers of 4 heads, d_ff 384, T 64) and bench_cpu.py's
reference (d 64, 2 layers of 4 heads, d_ff 256, T 128), vocab 65, freshly initialised (seed 0) and copied
into a TorchGPT (torch_gpt.py). For each shape:

- **sampling**: greedy KV-cache generation of --tokens tokens from a one-character prompt, past seq_len
  (so the cache slides): ours through `generate` (what `microgpt sample` runs), on cpu and numpy, and
  without the cache on cpu (each token re-runs the last seq_len, model/decode.py's `Rerun`), against a
  Hugging Face-style `past_key_values` loop in torch (torch_decode.py). The cached texts must be
  identical: the line says so, or where they part.
- **exact eval** (`microgpt eval --stride 1`): --positions positions of tinyshakespeare, each scored with
  its full seq_len window, batches of 32, against the same in torch; the mean NLLs must agree to 1e-5
  (float32 forwards, float64 sums: the two differ by float32 rounding of the logits, about 1e-7).

Torch is timed with one thread and with every core, the faster counting as torch's figure (on 2 busy
cores its two threads can wait on each other for ms at a time); ours runs with every core. Every case
runs once per round, the order rotating from round to round, and the median of --rounds rounds counts:
the machine may be shared, so only ratios measured side by side mean much. The last line gives the ratios
ours/torch with lscpu's model name, the cores and the load average.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_sample.py
    python benchmarks/bench_sample.py --rounds 1 --tokens 100 --positions 256     # a quick look
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

from microgpt.backends import get_backend
from microgpt.core.threads import available_cores, set_threads
from microgpt.data.tokenizer import CharTokenizer
from microgpt.model.gpt import GPT, GPTConfig
from microgpt.use.evaluate import evaluate
from microgpt.use.sample import generate

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling modules below
from bench_cpu import REFERENCE, cpu_model_name
from corpus import load_tokens

try:
    import torch

    from torch_decode import exact_nll, greedy
    from torch_gpt import TorchGPT, load_from_microgpt

    TORCH_ERROR = None
except ImportError as exc:
    TORCH_ERROR = str(exc)

VOCAB = "".join(chr(c) for c in range(ord(" "), ord(" ") + 64)) + "\n"  # 65 characters
SHAPES = {"default": GPTConfig(len(VOCAB)), "reference": REFERENCE}
NLL_TOLERANCE = 1e-5  # float32 logits on both sides, summed in float64: they differ by ~1e-7 (see above)
EVAL_BATCH = 32  # eval's default --batch-size


def ours_sampler(model, tokenizer, n_tokens: int, cache: bool = True):
    return lambda: generate(model, tokenizer, "\n", n_tokens, temperature=0, cache=cache)


def torch_sampler(model, tokenizer, n_tokens: int, threads: int):
    def run():
        torch.set_num_threads(threads)
        return tokenizer.decode(greedy(model, list(tokenizer.encode("\n")), n_tokens))
    return run


def ours_evaluator(model, tokens: np.ndarray, positions: int):
    return lambda: evaluate(model, tokens, batch_size=EVAL_BATCH, max_positions=positions, stride=1).nll


def torch_evaluator(model, tokens: np.ndarray, positions: int, threads: int):
    def run():
        torch.set_num_threads(threads)
        return exact_nll(model, tokens, positions, EVAL_BATCH)
    return run


def rotate_rounds(cases: dict, rounds: int) -> tuple[dict[str, float], dict]:
    """(median seconds, last result) per case: each round runs every case once, the order rotating."""
    names, seconds, results = list(cases), {name: [] for name in cases}, {}
    for round_index in range(rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            results[name] = cases[name]()
            seconds[name].append(time.perf_counter() - start)
    return {name: float(np.median(s)) for name, s in seconds.items()}, results


def first_difference(a: str, b: str) -> str:
    if a == b:
        return "identical"
    at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return f"DIFFERENT from character {at}"


def bench_shape(name: str, config: GPTConfig, tokens: np.ndarray, args) -> tuple[float, float]:
    """Prints the shape's lines; returns (sampling cpu/torch, eval cpu/torch)."""
    cpu, numpy_model = (GPT(config, get_backend(b), seed=0) for b in ("cpu", "numpy"))
    theirs = TorchGPT(config.vocab_size, config.d_model, config.n_layers, config.head_dims, config.d_ff,
                      config.seq_len)
    load_from_microgpt(theirs, cpu.params.to_host())
    theirs.eval()
    tokenizer = CharTokenizer(VOCAB)
    heads = f"{config.n_heads} heads of {config.head_dims[0]}" if len(set(config.head_dims)) == 1 else \
        f"heads {list(config.head_dims)}"
    print(f"\n{name}: d {config.d_model}, {config.n_layers} layers, {heads}, d_ff {config.d_ff}, T {config.seq_len}, "
          f"{cpu.n_params:,} parameters")
    thread_counts = sorted({1, args.threads})
    warm = {"microgpt cpu": ours_sampler(cpu, tokenizer, 8), "microgpt numpy": ours_sampler(numpy_model, tokenizer, 8)}
    rotate_rounds(warm, 1)  # compile and cache outside the timings

    n = args.tokens
    sampling = {"microgpt cpu": ours_sampler(cpu, tokenizer, n), "microgpt numpy": ours_sampler(numpy_model, tokenizer, n),
                "microgpt cpu, no cache": ours_sampler(cpu, tokenizer, n, cache=False)}
    sampling.update({f"torch KV cache, {t} thread{'s' * (t > 1)}": torch_sampler(theirs, tokenizer, n, t)
                     for t in thread_counts})
    seconds, texts = rotate_rounds(sampling, args.rounds)
    print(f"  sampling: {n} greedy tokens (past T {config.seq_len} the cache slides), median of {args.rounds}")
    for case, s in seconds.items():
        print(f"    {case:28s} {n / s:>9,.0f} tok/s")
    best_torch = min(s for case, s in seconds.items() if case.startswith("torch"))
    cached = [f"{case} {first_difference(text, texts['microgpt cpu'])}" for case, text in texts.items()
              if case != "microgpt cpu" and "no cache" not in case]
    print(f"    greedy text against microgpt cpu's: {', '.join(cached)}; without the cache "
          f"{first_difference(texts['microgpt cpu, no cache'], texts['microgpt cpu'])} (past T it re-runs the "
          "cropped window, which may give another text)")
    sample_ratio = best_torch / seconds["microgpt cpu"]

    p = args.positions
    evaluation = {"microgpt cpu": ours_evaluator(cpu, tokens, p), "microgpt numpy": ours_evaluator(numpy_model, tokens, p)}
    evaluation.update({f"torch, {t} thread{'s' * (t > 1)}": torch_evaluator(theirs, tokens, p, t)
                       for t in thread_counts})
    seconds, nlls = rotate_rounds(evaluation, args.rounds)
    print(f"  exact eval (--stride 1): {p} positions, each with its {config.seq_len}-token window, batches of "
          f"{EVAL_BATCH}, median of {args.rounds}")
    for case, s in seconds.items():
        print(f"    {case:28s} {p / s:>9,.0f} positions/s   nll {nlls[case]:.7f}")
    gap = max(abs(nll - nlls["microgpt cpu"]) for nll in nlls.values())
    print(f"    nll: largest difference from microgpt cpu's {gap:.1e} ({'within' if gap <= NLL_TOLERANCE else 'OUTSIDE'} "
          f"{NLL_TOLERANCE:.0e})")
    eval_ratio = min(s for case, s in seconds.items() if case.startswith("torch")) / seconds["microgpt cpu"]
    return sample_ratio, eval_ratio


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=500, help="greedy tokens per sampling run (default 500)")
    parser.add_argument("--positions", type=int, default=2048, help="positions per eval run (default 2048)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds; the median counts (default 3)")
    parser.add_argument("--threads", type=int, default=available_cores(), help="ours' threads, and torch's most")
    parser.add_argument("--shapes", nargs="*", choices=list(SHAPES), default=list(SHAPES))
    args = parser.parse_args(argv)
    if min(args.tokens, args.positions, args.rounds, args.threads) < 1:
        parser.error("--tokens, --positions, --rounds and --threads must be at least 1")
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    if TORCH_ERROR is not None:
        print(f"bench_sample compares against PyTorch, which is not importable ({TORCH_ERROR}): pip install torch")
        return
    set_threads(args.threads)
    tokens, source = load_tokens(len(VOCAB), 0, n_random=100_000)
    load_before = os.getloadavg()[0]
    print(f"data: {source}; torch {torch.__version__}; microgpt with {args.threads} threads, torch with "
          f"{' and '.join(str(t) for t in sorted({1, args.threads}))} (its faster counts)")
    ratios = {name: bench_shape(name, SHAPES[name], tokens, args) for name in args.shapes}
    figures = "; ".join(f"{name}: sampling {s:.2f}x, exact eval {e:.2f}x" for name, (s, e) in ratios.items())
    print(f"\nmicrogpt cpu / torch eager, median of {args.rounds}: {figures}  [{cpu_model_name()}, "
          f"{available_cores()} cores, load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after]")


if __name__ == "__main__":
    main()
