"""Choose the default run: train candidate recipes on the bundled corpus in a fixed time budget, compare.

Each candidate (a model shape, batch and optimiser recipe) is timed for a few
steps, given as many steps as fit in --budget seconds at that speed, trained on
the bundled Python docs with the last --holdout characters held out, and scored
on every non-overlapping window of that tail. The table (docs/recipe.md keeps
the one that chose the defaults) is printed as Markdown.

Time is the process's CPU time, run with one BLAS thread: on a shared machine
wall time moves with everyone else's jobs, while one thread's CPU time is about
what the step costs on a quiet core, so a budget of 60 s is a run of at most
about a minute on a quiet 2-core machine (where BLAS may use both cores).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_NUM_THREADS=1 \
        python benchmarks/sweep_default.py [--budget 60] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from microgpt.backends import get_backend
from microgpt.data.batches import RandomBatches
from microgpt.data.corpus import default_corpus, split_validation
from microgpt.data.tokenizer import CharTokenizer
from microgpt.model.gpt import GPT
from microgpt.settings.sources import Settings
from microgpt.settings.training import TrainConfig
from microgpt.training.optim import Optimizer
from microgpt.training.plan import make_batches

RECIPE = {"warmup": 100, "lr_schedule": "cosine", "weight_decay": 0.1, "beta2": 0.99, "grad_clip": 1.0,
          "random_batches": True}
CANDIDATES = {  # name -> settings over the reference preset
    "reference": {},
    "ref-shape B8 recipe": {"batch_size": 8, "lr": 1e-3, **RECIPE},
    "d64 n2 T64 B16": {"seq_len": 64, "batch_size": 16, "lr": 2e-3, **RECIPE},
    "d128 n2 T64 B12": {"d_model": 128, "d_ff": 512, "seq_len": 64, "batch_size": 12, "lr": 1e-3, **RECIPE},
    "d128 n4 T64 B12 (nanoGPT)": {"d_model": 128, "n_layers": 4, "d_ff": 512, "seq_len": 64, "batch_size": 12,
                                  "lr": 1e-3, **RECIPE},
    "d96 n3 T64 B12": {"d_model": 96, "n_layers": 3, "d_ff": 384, "seq_len": 64, "batch_size": 12, "lr": 2e-3,
                       **RECIPE},
    "d128 n2 T128 B8": {"d_model": 128, "d_ff": 512, "seq_len": 128, "batch_size": 8, "lr": 1e-3, **RECIPE},
    "d128 n2 T64 B12 lr2e-3": {"d_model": 128, "d_ff": 512, "seq_len": 64, "batch_size": 12, "lr": 2e-3, **RECIPE},
    "d96 n4 T64 B12 lr2e-3": {"d_model": 96, "n_layers": 4, "d_ff": 384, "seq_len": 64, "batch_size": 12,
                              "lr": 2e-3, **RECIPE},
    "d128 n3 T64 B12 lr2e-3": {"d_model": 128, "n_layers": 3, "d_ff": 512, "seq_len": 64, "batch_size": 12,
                               "lr": 2e-3, **RECIPE},
    "d96 n3 T64 B12 lr3e-3": {"d_model": 96, "n_layers": 3, "d_ff": 384, "seq_len": 64, "batch_size": 12,
                              "lr": 3e-3, **RECIPE},
    "d96 n3 T64 B8 lr2e-3": {"d_model": 96, "n_layers": 3, "d_ff": 384, "seq_len": 64, "batch_size": 8,
                             "lr": 2e-3, **RECIPE},
    "d96 n4 T64 B12 lr3e-3": {"d_model": 96, "n_layers": 4, "d_ff": 384, "seq_len": 64, "batch_size": 12,
                              "lr": 3e-3, **RECIPE},
    "d96 n3 T96 B12 lr3e-3": {"d_model": 96, "n_layers": 3, "d_ff": 384, "seq_len": 96, "batch_size": 12,
                              "lr": 3e-3, **RECIPE},
    "d96 n4 T64 B12 lr3e-3 sequential": {"d_model": 96, "n_layers": 4, "d_ff": 384, "seq_len": 64, "batch_size": 12,
                                         "lr": 3e-3, **RECIPE, "random_batches": False},
}


def tail_loss(model: GPT, tokens: np.ndarray, batch: int = 32) -> float:
    """Mean loss over every non-overlapping window (T + 1) of the held-out tokens."""
    t = model.config.seq_len
    count = (len(tokens) - 1) // t
    windows = np.stack([tokens[i * t : i * t + t + 1] for i in range(count)])  # (count, T + 1)
    losses = [model.loss(windows[i : i + batch]) * len(windows[i : i + batch]) for i in range(0, count, batch)]
    return float(sum(losses) / count)


def run(name: str, values: dict, budget: float, holdout: int, text: str) -> dict:
    settings = Settings({"preset": "reference", **values})
    tok = CharTokenizer.from_text(text)
    config = settings.model_config(tok.size)
    base = settings.train_config()
    train_tokens, val_tokens = split_validation(tok.encode(text), holdout, config.seq_len)
    model = GPT(config, get_backend("numpy"), seed=base.seed)
    probe = Optimizer(model.params, TrainConfig(**{**vars(base), "steps": 10**6, "warmup": 0}))
    batches = RandomBatches(train_tokens, config.seq_len, base.batch_size, base.seed)
    for _ in range(3):  # warm the allocator and BLAS
        model.gradients(batches.next())
    start = time.process_time()
    for _ in range(20):
        model.gradients(batches.next())
        probe.step()
    per_step = (time.process_time() - start) / 20
    steps = base.steps if not values else max(200, int(budget / per_step))  # the reference keeps its 10,000
    train = TrainConfig(**{**vars(base), "steps": steps})
    model = GPT(config, get_backend("numpy"), seed=base.seed)  # a fresh start for the measured run
    optimizer = Optimizer(model.params, train)
    batches = make_batches(train_tokens, config.seq_len, train)
    start, wall = time.process_time(), time.perf_counter()
    for _ in range(steps):
        model.gradients(batches.next())
        optimizer.step()
    seconds, wall = time.process_time() - start, time.perf_counter() - wall
    result = {"name": name, "params": model.n_params, "steps": steps, "seconds": seconds,
              "val": tail_loss(model, val_tokens)}
    print(f"| {name} | {model.n_params:,} | {base.batch_size} | {train.lr:g} | {steps} | {seconds:.0f} ({wall:.0f}) | "
          f"{result['val']:.4f} |", flush=True)
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--budget", type=float, default=60.0, help="training seconds per candidate")
    p.add_argument("--holdout", type=int, default=46_000, help="characters held out at the end (about 10%%)")
    p.add_argument("--only", nargs="*", help="candidate names to run")
    args = p.parse_args()
    text, description = default_corpus()
    print(f"{description}; last {args.holdout:,} held out; budget {args.budget:.0f}s; "
          f"load average {os.getloadavg()[0]:.2f}")
    print("| candidate | parameters | batch | lr | steps | CPU s (wall s) | held-out loss |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, values in CANDIDATES.items():
        if not args.only or name in args.only:
            run(name, values, args.budget, args.holdout, text)


if __name__ == "__main__":
    main()
