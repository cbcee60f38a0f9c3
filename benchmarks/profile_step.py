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

--breakdown prints instead, per shape at bench_cpu.py's batch (reference B=16,
d128 B=12), where a step's time goes by kind: GEMM (BLAS: the backend's
products and every np.matmul inside its ops; attention's batched products
also apart), our numba kernels, allocation
(np.empty/zeros and the gradient buffers' zero-fill), copies (head split/merge,
ascontiguousarray, transposes), and Python dispatch: the rest of the step (op
glue, the model's Python) less the wrappers' own measured cost. That table is
one slice in one thread, what each thread runs. Then the threads: the whole
step on 1 thread (one pass) and on every thread (a slice each), how long the
main thread waits for the other slice, how much of the step runs outside the
parallel phases, and how much slower a slice runs beside another than alone.
With --torch, torch.profiler's split of torch_gpt.py's step (aten ops by self
time, the rest Python). The machine line gives lscpu's model name, the cores
and the load average.

    python3 benchmarks/profile_step.py --breakdown [--shapes reference d128] [--rounds 3] [--torch]

--plain-steps SHAPE only trains --steps steps of SHAPE at its batch on the cpu
backend, unwrapped, for a sampling profiler (after 4 s of start-up):

    perf record -D 4000 -e cpu-clock -o ref.data python3 benchmarks/profile_step.py --plain-steps reference --steps 300
    perf report -i ref.data --sort dso,sym --stdio

The wrappers cost about a microsecond a call; the per-step totals say how much
that adds. Where the cpu backend splits the batch into a slice per thread (B > 1,
several threads), the timers could not tell the threads apart, so the tables
profile one slice in one thread: what each thread runs at the same time.
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
import subprocess
import sys
import time
from collections import defaultdict
from contextlib import contextmanager
from functools import cache, partial
from pathlib import Path

import numpy as np

from microgpt.backends import cpu_backend as cpu_module
from microgpt.backends import get_backend
from microgpt.backends import numpy_backend as numpy_module
from microgpt.core.threads import available_cores, blas_thread_setter, set_threads
from microgpt.model import attention as attention_module
from microgpt.model.gpt import GPT, GPTConfig
from microgpt.model.thread_split import ThreadSplit, slice_count

SHAPES = {  # the shapes of bench_cpu.py
    "reference": GPTConfig(vocab_size=65, d_model=64, n_layers=2, head_dims=(16,) * 4, d_ff=256, seq_len=128),
    "d128": GPTConfig(vocab_size=65, d_model=128, n_layers=4, head_dims=(32,) * 4, d_ff=512, seq_len=64),
    "d384": GPTConfig(vocab_size=65, d_model=384, n_layers=6, head_dims=(64,) * 6, d_ff=1536, seq_len=256),
}
LR = 3e-4
BREAKDOWN_BATCH = {"reference": 16, "d128": 12, "d384": 8}  # bench_cpu.py's batch per shape
GEMM, KERNELS, ALLOCATION, COPIES = "GEMM (BLAS)", "numba kernels", "allocation", "copies"
ATTENTION_GEMM = "  of which attention's Q K^T, P V"  # the cpu backend's own np.matmul calls: attention's only
NUMPY_KINDS = {  # NumPy functions the backends call, by kind
    GEMM: ("matmul", "dot"),
    ALLOCATION: ("empty", "empty_like", "zeros", "zeros_like", "ones"),
    COPIES: ("ascontiguousarray", "copyto", "concatenate", "stack"),
}
BACKEND_KINDS = {  # backend ops wholly of one kind (matmul_into's accumulate adds a pass over dst: counted as GEMM)
    GEMM: ("matmul", "matmul_into", "bmm"),
    ALLOCATION: ("zeros", "zero_"),
    COPIES: ("transpose", "stack", "ids", "from_host"),
}
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
    layers = [("final_norm", model.final_norm), ("head", model.head)]
    for block in model.blocks:
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


@cache
def thread_split(model: GPT) -> ThreadSplit:
    """The model's batches split over the backend's threads, as the trainer splits them (model/thread_split.py)."""
    return ThreadSplit(model)


def run_steps(model: GPT, batches: list[np.ndarray]) -> float:
    """Seconds to train on every batch as the trainer does: over the backend's threads, then the reference's Adam."""
    split = thread_split(model)
    start = time.perf_counter()
    for windows in batches:
        model.params.zero_grad()
        split.loss_and_backward(windows)
        model.params.adam_step(LR)
    return time.perf_counter() - start


class _Proxy:
    """Stands in for a module or namespace: its own attributes first, then the wrapped one's."""

    def __init__(self, inner, **overrides):
        self._inner = inner
        self.__dict__.update(overrides)

    def __getattr__(self, name):
        return getattr(self._inner, name)


@contextmanager
def timed_by_kind(backend, timer: ExclusiveTimer):
    """For the duration, every GEMM, numba kernel, allocation and copy the backend and attention make goes
    through timer, labelled by its kind (the backends' `np`, the backend's ops and kernels, head split/merge)."""
    def wrapped_np(gemm_label: str) -> _Proxy:
        return _Proxy(np, **{name: timer.wrap(gemm_label if kind == GEMM else kind, getattr(np, name))
                             for kind, names in NUMPY_KINDS.items() for name in names})

    patches = [(cpu_module, "np", wrapped_np(ATTENTION_GEMM)), (numpy_module, "np", wrapped_np(GEMM)),
               (numpy_module, "_row_sums", timer.wrap(GEMM, numpy_module._row_sums)),
               (numpy_module, "_column_sums", timer.wrap(GEMM, numpy_module._column_sums)),
               (attention_module, "split_heads", timer.wrap(COPIES, attention_module.split_heads)),
               (attention_module, "merge_heads", timer.wrap(COPIES, attention_module.merge_heads))]
    if hasattr(backend, "kernels"):
        patches.append((backend, "kernels", _Proxy(backend.kernels, **{
            name: _Proxy(module, **{f: timer.wrap(KERNELS, getattr(module, f)) for f in dir(module)
                                    if hasattr(getattr(module, f), "py_func")})  # numba dispatchers
            for name, module in vars(backend.kernels).items()})))
    patches += [(backend, op, timer.wrap(kind, getattr(backend, op)))
                for kind, ops in BACKEND_KINDS.items() for op in ops]
    originals = [(target, name, getattr(target, name)) for target, name, _ in patches]
    for target, name, value in patches:
        setattr(target, name, value)
    try:
        yield
    finally:
        for target, name, value in reversed(originals):
            setattr(target, name, value)


def wrapper_cost(calls: int = 200_000) -> float:
    """Seconds one ExclusiveTimer wrapper adds to a call (a no-op, timed bare and wrapped)."""
    def noop():
        return None

    wrapped = ExclusiveTimer().wrap("noop", noop)
    start = time.perf_counter()
    for _ in range(calls):
        noop()
    bare = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(calls):
        wrapped()
    return max(0.0, (time.perf_counter() - start - bare) / calls)


def machine_line(threads: int) -> str:
    """lscpu's model name, the cores, the threads used and the load average."""
    try:
        lscpu = subprocess.run(["lscpu"], check=False, capture_output=True, text=True, timeout=10).stdout
        model = next((line.split(":", 1)[1].strip() for line in lscpu.splitlines() if line.startswith("Model name")),
                     "unknown")
    except (OSError, subprocess.SubprocessError):
        model = "unknown (no lscpu)"
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"machine: {model}, {available_cores()} cores, {threads} threads; load average {load}"


def print_kinds(config: GPTConfig, batch: int, steps: int, rounds: int) -> None:
    """One slice's step in one thread, split into GEMM, kernels, allocation, copies and Python dispatch (the
    timed calls and the wrapped step over every round; the unwrapped step the median of rounds)."""
    set_threads(1)
    warmup, batches = random_batches(config, batch, 3), random_batches(config, batch, steps)
    plain = GPT(config, make_backend("cpu", 1), seed=0)
    run_steps(plain, warmup)
    unwrapped = median_step(plain, batches, rounds)
    timer = ExclusiveTimer()
    model = GPT(config, make_backend("cpu", 1), seed=0)
    with timed_by_kind(model.be, timer):
        run_steps(model, warmup)
        timer.reset()
        wrapped = sum(run_steps(model, batches) for _ in range(rounds)) / (rounds * steps)  # the mean, as the timer's
    steps *= rounds  # the timer counted every round
    calls = sum(timer.calls.values()) / steps
    overhead = calls * wrapper_cost()
    dispatch = wrapped - sum(timer.seconds.values()) / steps - overhead  # ATTENTION_GEMM is a label of its own
    print(f"  one slice, B={batch}, 1 thread: {1000 * unwrapped:.2f} ms/step unwrapped, {1000 * wrapped:.2f} wrapped "
          f"({calls:,.0f} timed calls a step)")
    gemm = (timer.seconds[GEMM] + timer.seconds[ATTENTION_GEMM]) / steps
    rows = [(GEMM, gemm, (timer.calls[GEMM] + timer.calls[ATTENTION_GEMM]) / steps)]
    rows += [(kind, timer.seconds[kind] / steps, timer.calls[kind] / steps) for kind in (ATTENTION_GEMM, KERNELS,
                                                                                        ALLOCATION, COPIES)]
    rows += [("Python dispatch (the rest)", dispatch, None), ("the timers' own cost", overhead, None)]
    for label, seconds, count in rows:
        counted = f"{count:6,.0f} calls" if count is not None else ""
        print(f"    {label:34s} {1000 * seconds:8.3f} ms {100 * seconds / wrapped:5.1f}%  {counted}")


def print_threads(config: GPTConfig, batch: int, steps: int, threads: int, rounds: int) -> None:
    """The whole step on 1 thread and on `threads` (medians of rounds), and where the threads wait (means)."""
    warmup, batches = random_batches(config, batch, 3), random_batches(config, batch, steps)

    def step_seconds(count: int) -> float:
        set_threads(count)
        model = GPT(config, make_backend("cpu", count), seed=0)
        run_steps(model, warmup)
        return median_step(model, batches, rounds)

    one, many = step_seconds(1), step_seconds(threads)
    print(f"  whole step, B={batch}: 1 thread (one pass) {1000 * one:.2f} ms, {threads} threads (a slice each) "
          f"{1000 * many:.2f} ms: {one / many:.2f}x")
    if threads < 2:
        return
    phases = {}
    set_blas_threads = blas_thread_setter()
    for together in (True, False):
        set_threads(threads)
        model = GPT(config, make_backend("cpu", threads), seed=0)
        totals = phases[together] = defaultdict(float)
        run_pool = model.be._pool.run

        def run(tasks, totals=totals, run_pool=run_pool, together=together):
            slices = isinstance(tasks[0], partial)  # the model's slice passes; lambdas are element-wise chunks
            times = [0.0] * len(tasks)

            def timed(i, task):
                start = time.perf_counter()
                try:
                    return task()
                finally:
                    times[i] = time.perf_counter() - start

            start = time.perf_counter()
            if together or not slices:
                out = run_pool([partial(timed, i, task) for i, task in enumerate(tasks)])
            else:  # the same slices one after another, each alone with BLAS in one thread
                set_blas_threads(1)
                out = [timed(i, task) for i, task in enumerate(tasks)]
                set_blas_threads(threads)
            wall = time.perf_counter() - start
            kind = "slices" if slices else "chunks"
            totals[f"{kind} wall"] += wall
            totals[f"{kind} main"] += times[0]
            totals[f"{kind} other"] += max(times[1:], default=0.0)
            return out

        model.be._pool.run = run
        run_steps(model, warmup)
        totals.clear()
        totals["step"] = sum(run_steps(model, batches) for _ in range(rounds))
    steps *= rounds
    per = {key: 1000 * value / steps for key, value in phases[True].items()}
    alone = {key: 1000 * value / steps for key, value in phases[False].items()}
    rest = per["step"] - per["slices wall"] - per.get("chunks wall", 0.0)
    print(f"    slices at once (wall)              {per['slices wall']:8.3f} ms {100 * per['slices wall'] / per['step']:5.1f}%"
          f"  main thread's slice {per['slices main']:.3f}, the other's {per['slices other']:.3f}")
    print(f"    main thread waiting for the other  {per['slices wall'] - per['slices main']:8.3f} ms")
    print(f"    element-wise in chunks (Adam, ...) {per.get('chunks wall', 0.0):8.3f} ms "
          f"{100 * per.get('chunks wall', 0.0) / per['step']:5.1f}%")
    print(f"    one thread only (the rest)         {rest:8.3f} ms {100 * rest / per['step']:5.1f}%  "
          "(gradient combination below its threshold, zero_grad, Python)")
    print(f"    a slice beside another / alone     {per['slices main']:.3f} / {alone['slices main']:.3f} ms: "
          f"{per['slices main'] / alone['slices main']:.2f}x slower together")


def print_torch(config: GPTConfig, batch: int, steps: int, threads: int, rounds: int, top: int = 5) -> None:
    """torch_gpt.py's step under torch.profiler: aten ops by self time, grouped by kind, the rest Python and
    autograd; then the top other ops by name."""
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile
    except ImportError:
        print("  torch: not installed")
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from torch_gpt import TorchGPT, make_adam, train_step

    torch.set_num_threads(threads)
    c = config
    model = TorchGPT(c.vocab_size, c.d_model, c.n_layers, c.head_dims, c.d_ff, c.seq_len)
    optimizer = make_adam(model, LR)
    warmup = [torch.from_numpy(w) for w in random_batches(config, batch, 3)]
    batches = [torch.from_numpy(w) for w in random_batches(config, batch, steps)]

    def run(windows_list):
        start = time.perf_counter()
        for windows in windows_list:
            train_step(model, optimizer, windows)
        return time.perf_counter() - start

    run(warmup)
    plain = float(np.median([run(batches) / steps for _ in range(rounds)]))
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        profiled = run(batches) / steps
    kinds = {GEMM: ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"),
             "fused attention (SDPA)": ("aten::_scaled_dot_product_flash_attention_for_cpu",
                                        "aten::_scaled_dot_product_flash_attention_for_cpu_backward"),
             ALLOCATION: ("aten::empty", "aten::empty_strided", "aten::zeros", "aten::zero_", "aten::fill_",
                          "aten::resize_", "aten::empty_like"),
             COPIES: ("aten::copy_", "aten::clone", "aten::cat", "aten::contiguous")}
    kind_of = {name: kind for kind, names in kinds.items() for name in names}
    seconds: dict[str, float] = defaultdict(float)
    others: dict[str, float] = {}
    for event in prof.key_averages():
        kind = kind_of.get(event.key, "other aten ops")
        seconds[kind] += event.self_cpu_time_total / 1e6 / steps
        if kind == "other aten ops":
            others[event.key] = event.self_cpu_time_total / 1e6 / steps
    python = profiled - sum(seconds.values())
    print(f"  torch {torch.__version__}, B={batch}, {threads} thread{'s' if threads > 1 else ''}: {1000 * plain:.2f} ms/step, "
          f"{1000 * profiled:.2f} profiled")
    for label in (GEMM, "fused attention (SDPA)", "other aten ops", ALLOCATION, COPIES):
        print(f"    {label:34s} {1000 * seconds[label]:8.3f} ms {100 * seconds[label] / profiled:5.1f}%")
    print(f"    {'Python and autograd (the rest)':34s} {1000 * python:8.3f} ms {100 * python / profiled:5.1f}%")
    print("    top other aten ops: " + ", ".join(
        f"{name} {1000 * sec:.2f}" for name, sec in sorted(others.items(), key=lambda item: -item[1])[:top]))


def breakdown(shape: str, steps: int, threads: int, with_torch: bool, rounds: int) -> None:
    config, batch = SHAPES[shape], BREAKDOWN_BATCH[shape]
    print(f"{shape} B={batch}: {config}")
    print(f"  {machine_line(threads)}")
    streams = min(threads, batch)
    part = -(-batch // streams)
    print_kinds(config, part, steps, rounds)
    if with_torch:  # the same work in the same one thread: one slice
        print_torch(config, part, steps, 1, rounds)
    print_threads(config, batch, steps, threads, rounds)
    set_threads(threads)


def median_step(model: GPT, batches: list[np.ndarray], rounds: int) -> float:
    """The median over rounds of seconds per step on batches (a shared machine drifts within minutes)."""
    return float(np.median([run_steps(model, batches) / len(batches) for _ in range(rounds)]))


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
    streams = slice_count(plain.be, batch)
    if streams > 1:  # the timers below see one thread; profile what each thread runs instead
        part = -(-batch // streams)
        print(f"  the batch runs as {streams} slices at once, one per thread; the tables profile one slice: "
              f"B={part} with 1 thread")
        set_threads(1)
        profile_batch(config, backend, part, steps, top, 1)
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
    parser.add_argument("--breakdown", action="store_true",
                        help="where the step's time goes by kind, per shape at bench_cpu.py's batch (see above)")
    parser.add_argument("--shapes", nargs="+", choices=sorted(SHAPES), default=["reference", "d128"],
                        help="--breakdown's shapes (default: reference d128)")
    parser.add_argument("--rounds", type=int, default=3, help="--breakdown: rounds of --steps steps (default 3)")
    parser.add_argument("--torch", action="store_true", help="--breakdown: also torch_gpt.py's step under torch.profiler")
    parser.add_argument("--plain-steps", choices=sorted(SHAPES), help="only train --steps steps of this shape (for perf)")
    args = parser.parse_args(argv)
    if args.plain_steps:
        config, batch = SHAPES[args.plain_steps], BREAKDOWN_BATCH[args.plain_steps]
        model = GPT(config, make_backend("cpu", args.threads), seed=0)
        run_steps(model, random_batches(config, batch, 3))
        seconds = run_steps(model, random_batches(config, batch, args.steps)) / args.steps
        print(f"{args.plain_steps} B={batch}: {1000 * seconds:.2f} ms/step")
        return
    if args.breakdown:
        for shape in args.shapes:
            breakdown(shape, args.steps, args.threads, args.torch, args.rounds)
            print()
        return
    config = SHAPES[args.shape]
    print(f"{args.shape}: {config}")
    print(f"{set_threads(args.threads)} threads")
    for batch in args.batch_sizes:
        for backend in args.backends:
            profile_batch(config, backend, batch, args.steps, args.top, args.threads)
            print()


if __name__ == "__main__":
    main()
