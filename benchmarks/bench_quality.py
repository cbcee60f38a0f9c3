"""Model quality against wall time: nanoGPT's shakespeare_char CPU recipe, ours against eager PyTorch.

The recipe (nanoGPT's README, "baby GPT" on a CPU): 4 layers, d_model 128, 4
heads, T 64, B 12, 2000 iterations, lr 1e-3 with 100 warm-up steps and a cosine
to 1e-4, AdamW β (0.9, 0.99), weight decay 0.1 on the weight matrices, gradients
clipped to a global norm of 1.0; d_ff 4 × d_model. The corpus is tinyshakespeare
with its last 10% held out. Ours (microgpt's optimiser, any --backend) and
TorchGPT (benchmarks/torch_gpt.py: the same model, torch.optim.AdamW,
clip_grad_norm_) start from the same weights and train on the same random
windows, in alternating chunks of --eval-every steps (so a shared machine's load
hits both alike); after each chunk both are scored on the same held-out
windows, and evaluation time is not counted in the wall time. It prints the validation loss
against training seconds for both, the time ours takes to reach PyTorch's final
validation loss, and draws both curves in one PNG.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_quality.py [--backend cpu] [--threads 1]
    python benchmarks/bench_quality.py --steps 200 --eval-every 50      # a short look

Needs tinyshakespeare.txt (../shared/data/ or --corpus). Without torch, ours runs alone.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from microgpt.backends import get_backend
from microgpt.data.batches import RandomBatches
from microgpt.data.tokenizer import CharTokenizer
from microgpt.model.gpt import GPT, GPTConfig
from microgpt.settings.training import TrainConfig
from microgpt.training.optim import Optimizer, learning_rate

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling modules below
from corpus import CANDIDATES

RECIPE = {"n_layers": 4, "d_model": 128, "heads": 4, "seq_len": 64, "batch_size": 12, "steps": 2000, "lr": 1e-3,
          "warmup": 100, "min_lr": 1e-4, "beta2": 0.99, "weight_decay": 0.1, "grad_clip": 1.0}
NANOGPT_VAL = 1.88  # nanoGPT's reported validation loss for this recipe on a CPU


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="numpy", help="our backend (numpy, cpu, cuda); default numpy")
    p.add_argument("--steps", type=int, default=RECIPE["steps"])
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--val-windows", type=int, default=480, help="held-out windows of T + 1 scored per evaluation")
    p.add_argument("--corpus", type=Path, default=next((c for c in CANDIDATES if c.is_file()), None))
    p.add_argument("--out", type=Path, default=Path("bench_quality.png"))
    p.add_argument("--json", type=Path, help="also write the curves here")
    p.add_argument("--no-torch", action="store_true", help="run ours alone")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--threads", type=int, default=os.cpu_count(),
                   help="threads for torch and (with threadpoolctl) NumPy's BLAS; 1 is steadier on a busy machine")
    return p.parse_args()


def limit_blas_threads(threads: int) -> None:
    """Hold NumPy's BLAS to `threads` for the run where threadpoolctl is installed; say what happened."""
    try:
        import threadpoolctl
    except ImportError:
        print("threadpoolctl is not installed: NumPy's BLAS keeps its own thread count (OPENBLAS_NUM_THREADS)")
        return
    threadpoolctl.threadpool_limits(threads)
    print(f"NumPy's BLAS: {threads} threads (threadpoolctl)")


def val_windows(tokens: np.ndarray, seq_len: int, count: int) -> np.ndarray:
    """Up to count non-overlapping windows (count, T + 1), spread evenly over the held-out tokens."""
    available = (len(tokens) - 1) // seq_len
    starts = np.linspace(0, available - 1, min(count, available)).astype(int) * seq_len
    return np.stack([tokens[s : s + seq_len + 1] for s in starts])


class Ours:
    def __init__(self, config: GPTConfig, train: TrainConfig, backend: str, seed: int):
        self.model = GPT(config, get_backend(backend), seed=seed)
        self.optimizer = Optimizer(self.model.params, train)

    def step(self, windows: np.ndarray) -> float:
        loss = self.model.gradients(windows)
        self.optimizer.step()
        return loss

    def val_loss(self, windows: np.ndarray, batch: int = 48) -> float:
        return float(np.mean([self.model.loss(windows[i : i + batch]) for i in range(0, len(windows), batch)]))

    def sync(self) -> None:
        self.model.be.sync()


class Torch:
    def __init__(self, config: GPTConfig, train: TrainConfig, start: dict):
        import torch

        from torch_gpt import TorchGPT, load_from_microgpt, make_adamw

        self.torch, self.train = torch, train
        self.model = TorchGPT(config.vocab_size, config.d_model, config.n_layers, config.head_dims, config.d_ff,
                              config.seq_len)
        load_from_microgpt(self.model, start)
        self.optimizer = make_adamw(self.model, train.lr, (train.beta1, train.beta2), train.weight_decay)
        self.t = 0

    def step(self, windows: np.ndarray) -> float:
        from torch_gpt import train_step

        self.t += 1
        return train_step(self.model, self.optimizer, self.torch.from_numpy(windows.astype(np.int64)),
                          learning_rate(self.train, self.t), self.train.grad_clip)

    def val_loss(self, windows: np.ndarray, batch: int = 48) -> float:
        import torch.nn.functional as F

        losses = []
        with self.torch.no_grad():
            for i in range(0, len(windows), batch):
                ids = self.torch.from_numpy(windows[i : i + batch].astype(np.int64))
                logits = self.model(ids[:, :-1])  # (b, T, V)
                losses.append(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1)).item())
        return float(np.mean(losses))

    def sync(self) -> None:
        pass


def train_curve(name: str, trainer, train_tokens, val, steps: int, every: int, seq_len: int, batch: int, seed: int):
    """Yields after each chunk of `every` steps (and the last): the curve so far, (step, training seconds,
    validation loss) from step 0. Chunks of the two sides alternate, so a change in machine load hits both."""
    batches = RandomBatches(train_tokens, seq_len, batch, seed)  # the same windows for both sides
    curve = [(0, 0.0, trainer.val_loss(val))]
    seconds = 0.0
    for step in range(1, steps + 1):
        start = time.perf_counter()
        trainer.step(batches.next())
        trainer.sync()
        seconds += time.perf_counter() - start
        if step % every == 0 or step == steps:
            curve.append((step, seconds, trainer.val_loss(val)))
            print(f"  {name:>8} step {step:5d}  {seconds:7.1f}s  val loss {curve[-1][2]:.4f}", flush=True)
            yield curve


def time_to_reach(curve, target: float) -> float | None:
    """Training seconds at the first evaluation at or below target (None if never)."""
    return next((seconds for _, seconds, loss in curve if loss <= target), None)


def draw(curves: dict, out: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5), dpi=100)
    for name, curve in curves.items():
        ax.plot([c[1] for c in curve], [c[2] for c in curve], "o-", markersize=3, label=name)
    ax.axhline(NANOGPT_VAL, color="grey", linestyle=":", label=f"nanoGPT's reported {NANOGPT_VAL}")
    ax.set_xlabel("training wall time (s)")
    ax.set_ylabel("validation loss (nats per character)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def main() -> int:
    args = parse_args()
    if args.corpus is None or not args.corpus.is_file():
        print("bench_quality: tinyshakespeare.txt not found; pass --corpus FILE", file=sys.stderr)
        return 2
    text = args.corpus.read_text(encoding="utf-8")
    tok = CharTokenizer.from_text(text)
    tokens = tok.encode(text, source=str(args.corpus))
    cut = int(len(tokens) * 0.9)
    train_tokens, val = tokens[:cut], val_windows(tokens[cut:], RECIPE["seq_len"], args.val_windows)
    config = GPTConfig(vocab_size=tok.size, d_model=RECIPE["d_model"], n_layers=RECIPE["n_layers"],
                         d_ff=4 * RECIPE["d_model"], seq_len=RECIPE["seq_len"],
                         head_dims=(RECIPE["d_model"] // RECIPE["heads"],) * RECIPE["heads"])
    train = TrainConfig(steps=args.steps, lr=RECIPE["lr"], warmup=min(RECIPE["warmup"], args.steps),
                        lr_schedule="cosine", min_lr=RECIPE["min_lr"], beta2=RECIPE["beta2"],
                        weight_decay=RECIPE["weight_decay"], grad_clip=RECIPE["grad_clip"],
                        batch_size=RECIPE["batch_size"])
    print(f"corpus {args.corpus} ({len(text):,} chars, vocab {tok.size}), last 10% held out; "
          f"{len(val)} validation windows; load average {os.getloadavg()[0]:.2f}")
    print(f"recipe: {json.dumps(RECIPE)}; steps {args.steps}")
    limit_blas_threads(args.threads)
    ours = Ours(config, train, args.backend, args.seed)
    print(f"{ours.model.n_params:,} parameters; ours on backend {ours.model.be.name}")
    start = ours.model.params.to_host()
    curves: dict[str, list] = {}
    runners = [(f"microgpt ({ours.model.be.name})", ours)]
    if not args.no_torch:
        try:
            import torch
        except ImportError:
            print("torch is not installed: ours alone")
        else:
            torch.set_num_threads(args.threads)
            runners.append((f"PyTorch {torch.__version__} eager ({torch.get_num_threads()} threads)",
                            Torch(config, train, start)))
    print(" and ".join(name for name, _ in runners) + f", in alternating chunks of {args.eval_every} steps")
    chunks = {name: train_curve(name.split()[0], runner, train_tokens, val, args.steps, args.eval_every,
                                RECIPE["seq_len"], RECIPE["batch_size"], args.seed) for name, runner in runners}
    for _ in range(-(-args.steps // args.eval_every)):
        for name, chunk in chunks.items():
            curves[name] = next(chunk)
    print("\nvalidation loss against training seconds")
    for name, curve in curves.items():
        step, seconds, loss = curve[-1]
        print(f"  {name}: {loss:.4f} at step {step}, {seconds:.1f}s ({seconds / step * 1000:.1f} ms/step)")
    if len(curves) == 2:
        ours_curve, torch_curve = curves.values()
        target, torch_seconds = torch_curve[-1][2], torch_curve[-1][1]
        reached = time_to_reach(ours_curve, target)
        verdict = (f"after {reached:.1f}s = {reached / torch_seconds:.2f} x PyTorch's {torch_seconds:.1f}s"
                   if reached is not None else "not within this run")
        print(f"  ours reaches PyTorch's final validation loss {target:.4f} {verdict}")
    if args.json:
        args.json.write_text(json.dumps({"recipe": RECIPE, "steps": args.steps, "curves": curves}, indent=1))
    try:
        draw(curves, args.out, f"shakespeare_char recipe, {ours.model.n_params:,} parameters")
        print(f"plot: {args.out}")
    except ImportError:
        print("no plot: pip install matplotlib")
    return 0


if __name__ == "__main__":
    sys.exit(main())
