"""The graph family on the CUDA backend, its kernels run on the CPU emulator (tests/cuda_emulator): a few
training steps of a graph with every kind of op the transformer uses (and GELU, a second loss head) match
the NumPy backend's, so a graph needs nothing of a backend but the contract."""

from __future__ import annotations

import numpy as np

from family_shapes import TINY_GRAPH
from microgpt.backends import get_backend
from microgpt.data.tokenizer import CharTokenizer
from microgpt.model.family import family

# float32 on both sides, the same formulas in another summation order: a few ulps per op, compounding over
# three Adam steps of a model this small to well under 1e-4
TOLERANCE = 1e-4


def losses(backend) -> list[float]:
    graph = family("graph")
    config = graph.Config(vocab_size=11, graph=TINY_GRAPH, seq_len=9)
    model = graph.build(config, backend, CharTokenizer("abcdefghijk"), 5)
    windows = np.random.default_rng(0).integers(0, 11, (3, 10))  # (B, T+1)
    found = []
    for _ in range(3):
        model.params.zero_grad()
        main, others = model.loss_and_backward(windows)
        model.params.adam_step(1e-2)
        found += [main, *others.values()]
    return found


def test_a_graph_trains_on_the_emulated_cuda_backend_as_on_numpy(emulated):
    on_cuda = losses(emulated[0])
    on_numpy = losses(get_backend("numpy", dtype=np.float32))
    assert np.allclose(on_cuda, on_numpy, rtol=0, atol=TOLERANCE), (on_cuda, on_numpy)
