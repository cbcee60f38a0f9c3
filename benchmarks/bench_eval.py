"""Held-out scoring speed against a training step's forward, side by side on one model and one machine.

Trains a small model (the default shape: d 96, 4 layers, d_ff 384, T 64) on tinyshakespeare's first 90%
for --steps steps, then on its last 10% times, in tokens per second:

- **forward**: a training step's forward and loss over --batch-size consecutive windows of T + 1 tokens, split
  over the backend's threads as the trainer splits it (`ThreadSplit(model).loss`), T tokens scored per
  window: what one step's forward costs per token;
- **eval --stride S** for S = T (eval's default: consecutive windows, each token with 1 to T tokens of
  context), T / 2, and 1 (exact: every token with its full T tokens of context, one window per token, which
  was eval's default before), each through `microgpt.use.evaluate.evaluate` in batches of --batch-size
  windows, its NLL beside it.

Every case runs once per round, the order rotating, and the median of --rounds rounds counts; only figures
of one run compare. The last line names lscpu's model name, the cores and the load average. `--vocab V`
scores random token ids with a freshly initialised model of vocabulary V instead (the host's log-softmax
grows with V, the forward's head too).

    python benchmarks/bench_eval.py
    python benchmarks/bench_eval.py --steps 20 --positions 2048 --rounds 1     # a quick look
    python benchmarks/bench_eval.py --vocab 4096 --positions 8192               # a BPE-sized vocabulary
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import microgpt
from microgpt.backends import get_backend
from microgpt.core.threads import available_cores
from microgpt.model.gpt import GPT, GPTConfig
from microgpt.model.thread_split import ThreadSplit
from microgpt.use.evaluate import evaluate

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling modules below
from bench_cpu import cpu_model_name
from corpus import CANDIDATES


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=100, help="training steps before scoring")
    p.add_argument("--backend", default="cpu")
    p.add_argument("--batch-size", type=int, default=32, help="windows per forward (eval's default)")
    p.add_argument("--positions", type=int, default=20_000, help="held-out positions each eval scores")
    p.add_argument("--exact-positions", type=int, default=2_048, help="positions the exact eval scores")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--vocab", type=int, help="an untrained model of this vocabulary on random ids instead")
    args = p.parse_args()
    corpus = next((c for c in CANDIDATES if c.is_file()), None)
    if corpus is None and not args.vocab:
        sys.exit("no tinyshakespeare.txt under shared/data beside or inside the checkout")
    load_before = os.getloadavg()[0]
    if args.vocab:
        model, tokenizer = GPT(GPTConfig(args.vocab), get_backend(args.backend), seed=0), None
        held_out = np.random.default_rng(0).integers(0, args.vocab, size=args.positions + 100_000).astype(np.int32)
        what = f"untrained, vocabulary {args.vocab:,}, random ids"
    else:
        text = corpus.read_text(encoding="utf-8")
        cut = len(text) * 9 // 10
        with tempfile.TemporaryDirectory() as tmp:
            train_file = Path(tmp, "train.txt")
            train_file.write_text(text[:cut], encoding="utf-8")
            microgpt.train(train_file, steps=args.steps, backend=args.backend, model=str(Path(tmp, "model")),
                           gen=0, val_tokens=0)
            loaded = microgpt.load(Path(tmp, "model"), backend=args.backend)
        model, tokenizer = loaded.model, loaded.tokenizer
        held_out = tokenizer.encode(text[cut:])
        what = f"{args.steps} steps on {corpus.name}'s first 90%"
    seq_len, batch = model.config.seq_len, args.batch_size
    windows = np.stack([held_out[s : s + seq_len + 1] for s in range(0, batch * seq_len, seq_len)])  # (B, T+1)
    step = ThreadSplit(model)  # the trainer's split of a batch over the threads
    cases = {"forward": lambda: (step.loss(windows), batch * seq_len)}
    for stride in (seq_len, seq_len // 2, 1):
        positions = args.exact_positions if stride == 1 else args.positions
        cases[f"eval --stride {stride}"] = scorer(model, held_out, batch, stride, positions, tokenizer)
    print(f"gpt d{model.config.d_model} T{seq_len}, {what}, {args.backend} backend, batches of {batch} windows; "
          f"median of {args.rounds} rounds")
    rates, results = rotate_rounds(cases, args.rounds)
    for name, rate in rates.items():
        nll = "" if name == "forward" else f"   NLL {results[name][0]:.4f}"
        print(f"  {name:<16} {rate:>10,.0f} tokens/s  {rate / rates['forward']:.3f}x the forward{nll}")
    print(f"[{cpu_model_name()}, {available_cores()} cores, load average {load_before:.2f} before, "
          f"{os.getloadavg()[0]:.2f} after]")


def scorer(model, tokens: np.ndarray, batch: int, stride: int, positions: int, tokenizer):
    def run():
        result = evaluate(model, tokens, batch_size=batch, max_positions=positions, stride=stride,
                          tokenizer=tokenizer)
        return result.nll, result.positions
    return run


def rotate_rounds(cases: dict, rounds: int) -> tuple[dict[str, float], dict]:
    """(median tokens/s, last result) per case: each round runs every case once, the order rotating; a case
    returns (its figure, the tokens it scored)."""
    names, rates, results = list(cases), {name: [] for name in cases}, {}
    for round_index in range(rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            results[name] = cases[name]()
            rates[name].append(results[name][1] / (time.perf_counter() - start))
    return {name: float(np.median(r)) for name, r in rates.items()}, results


if __name__ == "__main__":
    main()
