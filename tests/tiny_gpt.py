"""A tiny GPT over VOCAB (ten characters): two layers, two head groups of unequal widths (3 and 5), seq_len 6,
for the tests of checkpoints, sampling and evaluation; and `windows_for`, random token windows for any GPT."""

from __future__ import annotations

import numpy as np

from microgpt.backends import get_backend
from microgpt.model.gpt import GPT, GPTConfig

VOCAB = "\n abcdefgh"


def tiny_model(backend_name: str = "numpy", seed: int = 3, **shape) -> GPT:
    config = GPTConfig(vocab_size=len(VOCAB), **{"d_model": 8, "head_dims": (3, 5), "n_layers": 2, "d_ff": 12,
                                                    "seq_len": 6, **shape})
    return GPT(config, get_backend(backend_name), seed=seed)


def windows_for(config: GPTConfig, batch: int, seed: int) -> np.ndarray:
    """(batch, seq_len + 1) random token windows."""
    return np.random.default_rng(seed).integers(0, config.vocab_size, (batch, config.seq_len + 1))
