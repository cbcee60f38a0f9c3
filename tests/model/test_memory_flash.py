"""The training-memory estimate with flash attention (the CUDA default): no seq_len^2 term per head.

tests/model/test_memory.py holds the materialised estimate against NumPy's measured peak; there is no
GPU here to measure flash's, so these tests check what the estimate counts.
"""

from __future__ import annotations

import numpy as np

from microgpt.backends import get_backend
from microgpt.model import gpt
from microgpt.model.gpt import GPTConfig
from microgpt.model.memory import estimate_training_bytes, memory_parts

NUMPY = get_backend("numpy", dtype=np.float32)  # materialised attention, the same dtype as the CUDA backend


def config_at(seq_len: int, head_dims=(64,) * 6) -> GPTConfig:
    return GPTConfig(
        vocab_size=65, d_model=sum(head_dims), n_layers=4, head_dims=head_dims, d_ff=1536, seq_len=seq_len
    )


def parts(config, batch, backend):
    return memory_parts(gpt, config, batch, backend)


def test_flash_activations_grow_linearly_in_seq_len(emulated):
    flash, _ = emulated
    one, two = (parts(config_at(t), 8, flash) for t in (2048, 4096))
    assert two["activations"] == 2 * one["activations"]
    plain_one, plain_two = (parts(config_at(t), 8, NUMPY) for t in (2048, 4096))
    assert plain_two["activations"] > 3 * plain_one["activations"]  # dominated by the T^2 probabilities


def test_flash_drops_exactly_the_t_squared_terms(emulated):
    be, _ = emulated
    config, batch, t = config_at(4096), 8, 4096
    flash, plain = parts(config, batch, be), parts(config, batch, NUMPY)
    heads = batch * config.n_heads
    probabilities = config.n_layers * heads * t * t * 4  # bytes
    kept_instead = config.n_layers * heads * t * (64 + 1) * 4  # each head's output and log-sum-exps
    assert plain["activations"] - flash["activations"] == probabilities - kept_instead
    assert flash["workspace"] < plain["workspace"] / 10
    # at T = 4096 the probabilities and their temporaries are over 80% of the materialised estimate
    assert estimate_training_bytes(gpt, config, batch, be) < estimate_training_bytes(gpt, config, batch, NUMPY) / 5


def test_heads_wider_than_flash_takes_are_counted_materialised(emulated):
    be, _ = emulated
    wide = config_at(1024, head_dims=(256, 64))  # the 256-wide head takes the materialised path
    flash, plain = parts(wide, 2, be), parts(wide, 2, NUMPY)
    assert plain["activations"] - flash["activations"] == 4 * wide.n_layers * 2 * (1024 * 1024 - 1024 * 65)


def test_the_materialised_cuda_path_counts_as_numpy_does(emulated):
    be, _ = emulated
    be.attention = "materialised"
    assert parts(config_at(512), 4, be) == parts(config_at(512), 4, NUMPY)


def test_the_parts_add_up(emulated):
    be, _ = emulated
    config = config_at(512)
    assert sum(parts(config, 4, be).values()) == estimate_training_bytes(gpt, config, 4, be)
