"""The training-memory estimate with flash attention (the CUDA default): no seq_len^2 term per head.

tests/test_memory.py holds the materialised estimate against NumPy's measured peak; there is no
GPU here to measure flash's, so these tests check what the estimate counts.
"""

from __future__ import annotations

import numpy as np
import pytest

from cuda_emulator.backend import emulated_backend  # noqa: F401 - the `emulated` fixture
from microgpt.backends import get_backend
from microgpt.config import ModelConfig
from microgpt.memory import attention_kind, estimate_training_bytes, memory_parts


def config_at(seq_len: int, head_dims=(64,) * 6) -> ModelConfig:
    return ModelConfig(
        vocab_size=65, d_model=sum(head_dims), n_layers=4, head_dims=head_dims, d_ff=1536, seq_len=seq_len
    )


def test_flash_activations_grow_linearly_in_seq_len():
    one, two = (memory_parts(config_at(t), 8, attention="flash") for t in (2048, 4096))
    assert two["activations"] == 2 * one["activations"]
    plain_one, plain_two = (memory_parts(config_at(t), 8) for t in (2048, 4096))
    assert plain_two["activations"] > 3 * plain_one["activations"]  # dominated by the T^2 probabilities


def test_flash_drops_exactly_the_t_squared_terms():
    config, batch, t = config_at(4096), 8, 4096
    flash, plain = memory_parts(config, batch, attention="flash"), memory_parts(config, batch)
    heads = batch * config.n_heads
    probabilities = config.n_layers * heads * t * t * 4  # bytes
    kept_instead = config.n_layers * heads * t * (64 + 1) * 4  # each head's output and log-sum-exps
    assert plain["activations"] - flash["activations"] == probabilities - kept_instead
    assert flash["workspace"] < plain["workspace"] / 10
    # at T = 4096 the probabilities and their temporaries are over 80% of the materialised estimate
    assert (
        estimate_training_bytes(config, batch, attention="flash") < estimate_training_bytes(config, batch) / 5
    )


def test_heads_wider_than_flash_takes_are_counted_materialised():
    wide = config_at(1024, head_dims=(256, 64))  # the 256-wide head takes the materialised path
    flash, plain = memory_parts(wide, 2, attention="flash"), memory_parts(wide, 2)
    assert plain["activations"] - flash["activations"] == 4 * wide.n_layers * 2 * (1024 * 1024 - 1024 * 65)


def test_attention_kind_of_each_backend(emulated):
    be, _ = emulated
    assert attention_kind(be) == "flash"
    be.attention = "materialised"
    assert attention_kind(be) == "materialised"
    assert attention_kind(get_backend("numpy", dtype=np.float32)) == "materialised"


@pytest.mark.parametrize("attention", ["flash", "materialised"])
def test_the_parts_add_up(attention):
    config = config_at(512)
    assert sum(memory_parts(config, 4, attention=attention).values()) == estimate_training_bytes(
        config, 4, attention=attention
    )
