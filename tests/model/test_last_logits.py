"""GPT.last_logits, exact evaluation's forward (the last block over each window's last row alone, the windows
split over the backend's streams), against the last rows of a full forward on the numpy reference.

Awkward inputs: heads of unequal odd widths (two head groups), one layer (no block before the last), a window
of one token, a batch of one, and batches that do not split evenly over two streams.

Tolerances, each a share of the largest logit: float64 on numpy 1e-12 (the same sums in another order: BLAS
over fewer rows, window_attention's softmax for the causal one); the cpu backend in float32 against the float64
reference 2e-5 (float32 rounding through two blocks, a few ulp of values near 1 per op, and the kernel's exp
within 2 ulp of libm's).
"""

from __future__ import annotations

import numpy as np
import pytest

from microgpt.backends.cpu_backend import CpuBackend
from microgpt.backends.numpy_backend import NumpyBackend
from microgpt.model.gpt import GPT, GPTConfig
from microgpt.model.lookahead import Lookahead, LookaheadConfig

F64_TOL, F32_TOL = 1e-12, 2e-5  # see the module docstring

# (head widths, layers, seq_len): unequal odd heads, one layer, a window of one token, a long-ish window
SHAPES = [((3, 5), 2, 7), ((4, 4, 4), 1, 9), ((3, 5), 3, 1), ((8, 8), 2, 64)]


def models(config: GPTConfig, seed: int = 3):
    """The numpy reference in float64, and the cpu backend in float32 on two streams, with the same weights."""
    reference = GPT(config, NumpyBackend(dtype=np.float64), seed=seed)
    fast = GPT(config, CpuBackend(threads=2), seed=seed)
    return reference, fast


def full_forward_last_rows(model, ids: np.ndarray) -> np.ndarray:
    batch, seq_len = ids.shape
    return model.be.to_host(model.logits(ids)).reshape(batch, seq_len, -1)[:, -1]  # (B, vocab)


@pytest.mark.parametrize("heads, layers, seq_len", SHAPES)
@pytest.mark.parametrize("batch", [1, 2, 5])
def test_last_logits_match_the_full_forwards_last_rows(heads, layers, seq_len, batch):
    config = GPTConfig(vocab_size=11, d_model=sum(heads), n_layers=layers, head_dims=heads, d_ff=13, seq_len=seq_len)
    reference, fast = models(config)
    ids = np.random.default_rng(batch * 100 + seq_len).integers(0, 11, size=(batch, seq_len))  # (B, T)
    want = full_forward_last_rows(reference, ids)  # (B, vocab)
    scale = np.abs(want).max()
    np.testing.assert_allclose(reference.last_logits(ids), want, rtol=0, atol=F64_TOL * scale)
    np.testing.assert_allclose(fast.last_logits(ids), want, rtol=0, atol=F32_TOL * scale)


def test_a_lookahead_models_last_logits_are_its_main_heads():
    config = LookaheadConfig(vocab_size=11, d_model=8, n_layers=2, head_dims=(3, 5), d_ff=13, seq_len=6, lookahead=2)
    model = Lookahead(config, NumpyBackend(dtype=np.float64), seed=4)
    ids = np.random.default_rng(0).integers(0, 11, size=(3, 6))  # (B, T)
    want = full_forward_last_rows(model, ids)
    np.testing.assert_allclose(model.last_logits(ids), want, rtol=0, atol=F64_TOL * np.abs(want).max())
