"""The graph family against the family it was written from: a gpt graph's training step on the cpu backend,
beside the gpt family's, at the default and the reference shapes; compile time; the memory estimate.

For each shape both models start from the same seed (the same weights, test_graph_equivalence.py), take
the same windows and run Adam steps; rounds alternate which goes first, and each figure is the median of
the rounds' per-step times. The goal is graph / gpt <= 1.10. Then: the time to compile a 12-layer graph
(d 768), and the memory estimate of a graph step against the peak tracemalloc measures on the numpy backend
(float32), which should agree within 10%.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_graph.py
    python benchmarks/bench_graph.py --quick
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

from microgpt.backends import get_backend
from microgpt.core.machine import describe
from microgpt.data.tokenizer import CharTokenizer
from microgpt.model.family import family
from microgpt.model.graph.from_family import document_for
from microgpt.model.memory import estimate_training_bytes

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_cpu import cpu_model_name

VOCAB = "".join(chr(c) for c in range(ord(" "), ord(" ") + 64)) + "\n"  # 65 characters
SHAPES = {  # name -> (gpt shape, batch)
    "default": ({"d_model": 96, "n_layers": 4, "head_dims": (24,) * 4, "d_ff": 384, "seq_len": 64}, 12),
    "reference": ({"d_model": 64, "n_layers": 2, "head_dims": (16,) * 4, "d_ff": 256, "seq_len": 128}, 16),
}


def models(shape: dict, backend, seed: int = 0):
    gpt, graph = family("gpt"), family("graph")
    config = gpt.Config(vocab_size=len(VOCAB), **shape)
    graph_config = graph.Config(vocab_size=len(VOCAB), graph=document_for("gpt", config), seq_len=shape["seq_len"])
    tokenizer = CharTokenizer(VOCAB)
    return {"gpt": gpt.build(config, backend, tokenizer, seed), "graph": graph.build(graph_config, backend,
                                                                                      tokenizer, seed)}


def step(model, windows) -> None:
    model.params.zero_grad()
    model.loss_and_backward(windows)
    model.params.adam_step(3e-4)


def time_steps(model, windows, steps: int) -> float:
    started = time.perf_counter()
    for _ in range(steps):
        step(model, windows)
    model.be.sync()
    return (time.perf_counter() - started) / steps


def speed(rounds: int, steps: int, backend_name: str) -> None:
    backend = get_backend(backend_name)
    print(f"training step, {backend_name} backend, median of {rounds} rounds of {steps} steps")
    print(f"{'shape':<10} {'batch':>5} {'gpt ms':>8} {'graph ms':>9} {'graph/gpt':>10}")
    for name, (shape, batch) in SHAPES.items():
        built = models(shape, backend)
        windows = np.random.default_rng(1).integers(0, len(VOCAB), (batch, shape["seq_len"] + 1))
        times: dict[str, list[float]] = {"gpt": [], "graph": []}
        for kind in built:
            for _ in range(2):
                step(built[kind], windows)  # warm-up: kernels compiled, buffers made
        for r in range(rounds):
            for kind in (("gpt", "graph") if r % 2 == 0 else ("graph", "gpt")):
                times[kind].append(time_steps(built[kind], windows, steps))
        gpt_ms, graph_ms = (1000 * statistics.median(times[k]) for k in ("gpt", "graph"))
        print(f"{name:<10} {batch:>5} {gpt_ms:>8.2f} {graph_ms:>9.2f} {graph_ms / gpt_ms:>10.3f}")


def compile_time() -> None:
    config = family("gpt").Config(vocab_size=65, d_model=768, n_layers=12, head_dims=(64,) * 12, d_ff=3072,
                                  seq_len=256)
    document = document_for("gpt", config)
    started = time.perf_counter()
    program = family("graph").Config(vocab_size=65, graph=document, seq_len=256).program
    print(f"compile: a 12-layer graph (d 768, {len(program.nodes)} primitives) in "
          f"{1000 * (time.perf_counter() - started):.0f} ms")


def memory() -> None:
    backend = get_backend("numpy", dtype=np.float32)
    print("memory of a graph step, numpy float32: estimate / tracemalloc peak")
    for name, (shape, batch) in SHAPES.items():
        graph = family("graph")
        config = family("gpt").Config(vocab_size=len(VOCAB), **shape)
        graph_config = graph.Config(vocab_size=len(VOCAB), graph=document_for("gpt", config),
                                    seq_len=shape["seq_len"])
        windows = np.random.default_rng(1).integers(0, len(VOCAB), (batch, shape["seq_len"] + 1))
        tracemalloc.start()
        model = graph.build(graph_config, backend, CharTokenizer(VOCAB), 0)
        step(model, windows)  # the first step makes the caches
        tracemalloc.reset_peak()
        step(model, windows)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        estimate = estimate_training_bytes(graph, graph_config, batch, backend)
        print(f"{name:<10} {estimate / 2**20:7.2f} MiB / {peak / 2**20:7.2f} MiB = {estimate / peak:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--quick", action="store_true", help="3 rounds of 3 steps")
    args = parser.parse_args()
    print(f"{cpu_model_name()}; {describe()}")
    speed(args.rounds, 3 if args.quick else args.steps, args.backend)
    compile_time()
    memory()


if __name__ == "__main__":
    main()
