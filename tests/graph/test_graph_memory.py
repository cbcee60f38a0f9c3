"""The graph family's memory estimate (model/graph/memory.py) against the real peak of a training step on the
NumPy backend, measured with tracemalloc as tests/model/test_memory.py measures gpt's. The estimate walks the
program's backward, freeing what each node's backward frees; it comes within 5% for these shapes
(benchmarks/bench_graph.py prints the figures), and the test allows 12% either way for what it leaves out
(RoPE tables, masks, index arrays, how NumPy's temporaries overlap)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from family_shapes import TINY_GRAPH
from microgpt.backends import get_backend
from microgpt.data.tokenizer import CharTokenizer
from microgpt.model.family import family
from microgpt.model.graph.from_family import document_for
from microgpt.model.memory import estimate_training_bytes

NUMPY = get_backend("numpy", dtype=np.float32)
VOCAB = "".join(chr(c) for c in range(ord(" "), ord(" ") + 64)) + "\n"  # 65 characters


def measured_peak(config, batch: int) -> int:
    graph = family("graph")
    windows = np.random.default_rng(0).integers(0, config.vocab_size, (batch, config.seq_len + 1))
    tracemalloc.start()
    try:
        model = graph.build(config, NUMPY, CharTokenizer(VOCAB), 1)
        for step in range(2):  # the first step also builds caches (RoPE tables, masks)
            if step == 1:
                tracemalloc.reset_peak()
            model.params.zero_grad()
            model.loss_and_backward(windows)
            model.params.adam_step(1e-3)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def gpt_graph(batch: int, **shape):
    config = family("gpt").Config(vocab_size=len(VOCAB), **shape)
    return family("graph").Config(vocab_size=len(VOCAB), graph=document_for("gpt", config), seq_len=config.seq_len)


@pytest.mark.parametrize(("config", "batch"), [
    (gpt_graph(12, d_model=96, n_layers=4, head_dims=(24,) * 4, d_ff=384, seq_len=64), 12),
    (gpt_graph(16, d_model=64, n_layers=2, head_dims=(16,) * 4, d_ff=256, seq_len=128), 16),
    (gpt_graph(4, d_model=31, n_layers=2, head_dims=(1, 2, 4, 8, 16), d_ff=124, seq_len=64), 4),
    (family("graph").Config(vocab_size=len(VOCAB), graph={**TINY_GRAPH, "dims": {"d": 48, "heads": [16, 32],
                                                                             "d_ff": 96}}, seq_len=128), 8),
])
def test_the_estimate_is_within_12_percent_of_the_numpy_peak(config, batch):
    estimate = estimate_training_bytes(family("graph"), config, batch, NUMPY)
    peak = measured_peak(config, batch)
    assert 0.88 <= estimate / peak <= 1.12, f"estimate {estimate:,} against the peak {peak:,}"
