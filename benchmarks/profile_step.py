"""Where one training step's time goes, per backend (cpu, numpy): per op, per layer, and cProfile's top functions.

The reference default shape (d 64, 2 layers, 4 heads of 16, d_ff 256, T 128,
vocab 65) at B=1 and B=16, on random token ids; --shape d128 / d384 and
--batch-sizes pick bench_cpu.py's other cases. Three views of the same steps:

- backend ops: every public method of the backend instance is wrapped with a
  timer; time is exclusive (an op called inside another op counts once, in
  the inner one). What is left of the step is model code outside the backend
  (head split/merge copies, reshapes, Python).
- layers: the forward/backward of each layer instance is wrapped, named by its
  place in a block (all blocks added up); time is exclusive of the nested
  layers (attn.forward excludes attn.wq.forward, ...).
- cProfile: functions by their own time (tottime), a fresh unwrapped model.

The wrappers cost about a microsecond a call; the per-step totals say how much
that adds. Where the cpu backend splits the batch into a shard per thread (B > 1,
several threads), the timers could not tell the threads apart, so the tables
profile one shard in one thread: what each thread runs at the same time.
Threads: --threads (default every core) for BLAS and numba, through
microgpt.core.threads.set_threads.

    python3 benchmarks/profile_step.py [--backends cpu numpy] [--steps 20] [--top 15]
"""

from __future__ import annotations

import argparse
import cProfile
import inspect
import os
import pstats
import time
from collections import defaultdict

import numpy as np

from microgpt.backends import get_backend
from microgpt.core.threads import available_cores, set_threads
from microgpt.model.gpt import GPT, GPTConfig
from microgpt.model.shards import shard_count

SHAPES = {  # the shapes of bench_cpu.py
    "reference": GPTConfig(vocab_size=65, d_model=64, n_layers=2, head_dims=(16,) * 4, d_ff=256, seq_len=128),
    "d128": GPTConfig(vocab_size=65, d_model=128, n_layers=4, head_dims=(32,) * 4, d_ff=512, seq_len=64),
    "d384": GPTConfig(vocab_size=65, d_model=384, n_layers=6, head_dims=(64,) * 6, d_ff=1536, seq_len=256),
}
LR = 3e-4
BLOCK_LAYERS = ("ln1", "attn", "attn.wq", "attn.wk", "attn.wv", "attn.wo", "ln2", "ff", "ff.l1", "ff.l2")


class ExclusiveTimer:
    """Wall time and calls per label, each call's time less that of the timed calls nested in it."""

    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._nested: list[float] = []  # per open call: time spent in timed calls inside it

    def reset(self) -> None:
        self.seconds.clear()
        self.calls.clear()

    def wrap(self, label: str, function):
        def timed(*args, **kwargs):
            self._nested.append(0.0)
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - start
                self.seconds[label] += elapsed - self._nested.pop()
                self.calls[label] += 1
                if self._nested:
                    self._nested[-1] += elapsed

        return timed


def wrap_backend_ops(backend, timer: ExclusiveTimer) -> None:
    """Replace each public method of the backend instance by a timed one, labelled by its name."""
    for name in dir(type(backend)):
        if not name.startswith("_") and inspect.isfunction(inspect.getattr_static(type(backend), name)):
            setattr(backend, name, timer.wrap(name, getattr(backend, name)))


def wrap_layers(model: GPT, timer: ExclusiveTimer) -> None:
    """Time forward/backward of every layer, labelled by its path within a block (blocks added up)."""
    layers = [("final_norm", model.layers.final_norm), ("head", model.layers.head)]
    for block in model.layers.blocks:
        for path in BLOCK_LAYERS:
            layer = block
            for attribute in path.split("."):
                layer = getattr(layer, attribute)
            layers.append((path, layer))
    for path, layer in layers:
        for method in ("forward", "backward"):
            setattr(layer, method, timer.wrap(f"{path}.{method}", getattr(layer, method)))
    model.loss_and_backward = timer.wrap(
        "GPT.loss_and_backward (embedding, loss, glue)", model.loss_and_backward
    )
    model.params.zero_grad = timer.wrap("params.zero_grad", model.params.zero_grad)
    model.params.adam_step = timer.wrap("params.adam_step", model.params.adam_step)


def random_batches(config: GPTConfig, batch: int, count: int) -> list[np.ndarray]:
    rng = np.random.default_rng(batch)
    return [
        rng.integers(0, config.vocab_size, size=(batch, config.seq_len + 1)) for _ in range(count)
    ]  # (B, T+1)


def run_steps(model: GPT, batches: list[np.ndarray]) -> float:
    """Seconds to train on every batch."""
    start = time.perf_counter()
    for windows in batches:
        model.train_step(windows, LR)
    return time.perf_counter() - start


def print_table(
    title: str, timer: ExclusiveTimer, steps: int, step_seconds: float, top: int, rest_label: str
):
    """The top labels by time, per step and as a share of the step, then what the table leaves out."""
    rows = sorted(timer.seconds.items(), key=lambda item: -item[1])
    rest = step_seconds * steps - sum(timer.seconds.values())
    print(f"  {title}")
    for label, seconds in rows[:top]:
        share = 100 * seconds / (step_seconds * steps)
        per_step_ms = 1000 * seconds / steps
        print(f"    {label:48s} {per_step_ms:8.3f} ms {share:5.1f}%  {timer.calls[label] // steps:4d} calls")
    hidden = sum(seconds for _, seconds in rows[top:])
    if hidden:
        print(f"    {'(the other ' + str(len(rows) - top) + ')':48s} {1000 * hidden / steps:8.3f} ms")
    print(f"    {rest_label:48s} {1000 * rest / steps:8.3f} ms {100 * rest / (step_seconds * steps):5.1f}%")


def print_cprofile(profile: cProfile.Profile, steps: int, top: int) -> None:
    stats = pstats.Stats(
        profile
    ).stats  # (file, line, function) -> (prim calls, calls, tottime, cumtime, callers)
    rows = sorted(stats.items(), key=lambda item: -item[1][2])[:top]
    print("  cProfile, by own time (tottime) per step")
    for (path, line, function), (_, calls, own, cumulative, _) in rows:
        where = f"{os.path.basename(path)}:{line}({function})" if line else function
        print(
            f"    {where[:64]:64s} {1000 * own / steps:8.3f} ms own {1000 * cumulative / steps:8.3f} ms cum  {calls // steps:4d} calls"
        )


def make_backend(name: str, threads: int):
    """The backend with the run's threads (the cpu backend sets them itself when made)."""
    return get_backend(name, threads=threads) if name == "cpu" else get_backend(name)


def profile_batch(config: GPTConfig, backend: str, batch: int, steps: int, top: int, threads: int) -> None:
    warmup = random_batches(config, batch, 3)
    batches = random_batches(config, batch, steps)
    plain = GPT(config, make_backend(backend, threads), seed=0)
    run_steps(plain, warmup)
    step_seconds = run_steps(plain, batches) / steps
    print(
        f"{backend} B={batch}: {1000 * step_seconds:.2f} ms/step unwrapped ({batch * config.seq_len / step_seconds:,.0f} tok/s)"
    )
    streams = shard_count(plain.be, batch)
    if streams > 1:  # the timers below see one thread; profile what each thread runs instead
        shard = -(-batch // streams)
        print(f"  the batch runs as {streams} shards at once, one per thread; the tables profile one shard: "
              f"B={shard} with 1 thread")
        set_threads(1)
        profile_batch(config, backend, shard, steps, top, 1)
        set_threads(threads)
        return

    ops, layers = ExclusiveTimer(), ExclusiveTimer()
    model = GPT(config, make_backend(backend, threads), seed=0)
    wrap_backend_ops(model.be, ops)
    wrap_layers(model, layers)
    run_steps(model, warmup)
    ops.reset()
    layers.reset()
    wrapped_seconds = run_steps(model, batches) / steps
    print(f"  timed with wrappers: {1000 * wrapped_seconds:.2f} ms/step")
    print_table("backend ops (exclusive)", ops, steps, wrapped_seconds, top, "model code outside backend ops")
    print_table(
        "layers (exclusive of nested layers)", layers, steps, wrapped_seconds, top, "train_step itself"
    )

    fresh = GPT(config, make_backend(backend, threads), seed=0)
    run_steps(fresh, warmup)
    profile = cProfile.Profile()
    profile.enable()
    run_steps(fresh, batches)
    profile.disable()
    print_cprofile(profile, steps, top)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="profiled steps per batch size (default 20)")
    parser.add_argument("--top", type=int, default=15, help="rows per table (default 15)")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--backends", nargs="+", default=["cpu", "numpy"], help="default: cpu numpy")
    parser.add_argument("--threads", type=int, default=available_cores(), help="threads for BLAS and numba")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="reference", help="default: reference")
    args = parser.parse_args(argv)
    config = SHAPES[args.shape]
    print(f"{args.shape}: {config}")
    print(f"{set_threads(args.threads)} threads")
    for batch in args.batch_sizes:
        for backend in args.backends:
            profile_batch(config, backend, batch, args.steps, args.top, args.threads)
            print()


if __name__ == "__main__":
    main()
