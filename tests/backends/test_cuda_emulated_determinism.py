"""Bit-reproducible CUDA results, shown on the CPU emulator: the same inputs give the same bits
whatever order the blocks and threads run in (tests/cuda_emulator's `schedule`: ascending,
descending, seeded shuffles), for every kernel with a reduction and for whole training steps.

On a GPU the order varies from run to run by itself; a kernel whose result depended on it (a float
atomicAdd, say; see the self-test) would differ here between schedules.
"""

from __future__ import annotations

import numpy as np
import pytest

from cuda_emulator.launch import schedule
from microgpt.backends.cuda import kernel_launch as launch
from microgpt.model.gpt import GPT, GPTConfig

ORDERS = (0, 1, 5, 11)  # ascending, descending, two seeded shuffles


def same_bits_under_every_schedule(run) -> None:
    """run() -> list of host arrays; equal byte for byte under every order."""
    results = []
    for order in ORDERS:
        with schedule(order):
            results.append([np.asarray(a).tobytes() for a in run()])
    for order, result in zip(ORDERS[1:], results[1:]):
        assert result == results[0], f"order {order} differs from ascending"


def test_reductions_are_order_independent(emulated, monkeypatch):
    be, _ = emulated
    monkeypatch.setattr(launch, "MAX_ELEMENT_BLOCKS", 3)  # several blocks share each grid-stride loop
    rng = np.random.default_rng(0)
    x = be.from_host(rng.normal(0, 3, (150, 65)))  # 150 rows: the column sums take a second pass
    ids = rng.integers(0, 10, 150)
    ids[:100] = 3  # one row gathers 100 gradient rows

    def run():
        table = be.from_host(np.ones((10, 65)))
        be.embedding_scatter_add(x, ids, table, 150, 65)
        out, norm, std_inv = be.layer_norm_forward(x, x[:1], x[1:2])
        loss, dlogits = be.fused_softmax_ce_grad(x, ids)
        arrays = [table, be.sum_rows(x), out, *be.layer_norm_backward(x, norm, std_inv, x[:1]), dlogits]
        return [np.float64(loss)] + [be.to_host(a) for a in arrays]

    same_bits_under_every_schedule(run)


def test_flash_attention_is_order_independent(emulated):
    be, _ = emulated
    rng = np.random.default_rng(1)
    q, k, v, dout = (be.from_host(rng.normal(size=(3, 45, 20))) for _ in range(4))

    def run():
        out, saved = be.causal_attention(q, k, v, 0.3)
        return [be.to_host(a) for a in (out, *be.causal_attention_backward(dout, saved, 0.3))]

    same_bits_under_every_schedule(run)


@pytest.mark.parametrize("attention, precision", [("flash", "fp32"), ("materialised", "fp32"), ("flash", "bf16")])
def test_training_steps_are_order_independent(emulated, attention, precision):
    be, _ = emulated
    be.attention = attention
    be.use_precision(precision)  # bf16: the products' inputs rounded by round_bf16, attention materialised
    config = GPTConfig(vocab_size=11, d_model=16, n_layers=1, head_dims=(4, 4, 8), d_ff=24, seq_len=9)
    windows = np.random.default_rng(2).integers(0, 11, (3, 2, config.seq_len + 1))

    def run():
        model = GPT(config, be, seed=3)
        losses = [model.train_step(w, 1e-2) for w in windows]
        return [np.array(losses), be.to_host(model.params.data)]

    same_bits_under_every_schedule(run)
