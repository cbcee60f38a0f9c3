"""`Backend.attention_memory`: each backend's own count of what its attention keeps and its largest backward
temporary, against the formulas of the materialised path and of flash attention, and against what
`causal_attention` really keeps where that can be looked at (its `saved`)."""

from __future__ import annotations

import numpy as np
import pytest

from microgpt.backends import get_backend
from microgpt.backends.cuda.attention import FLASH_MAX_WIDTH

# (blocks, T, width): one position; T not a multiple of flash's 8-row blocks; the widest flash head and one past it
SHAPES = [(1, 1, 1), (6, 33, 16), (2, 70, FLASH_MAX_WIDTH), (3, 9, FLASH_MAX_WIDTH + 1)]


def materialised(blocks: int, t: int) -> tuple[int, int]:
    return blocks * t * t, 3 * blocks * t * t  # the probabilities; the scores' gradient and softmax temporaries


def flash(blocks: int, t: int, w: int) -> tuple[int, int]:
    return blocks * t * (w + 1), blocks * t  # each row's output and log-sum-exp; rowsum(dout * out)


@pytest.mark.parametrize("name", ["numpy", "cpu"])
@pytest.mark.parametrize("blocks,t,w", SHAPES)
def test_the_cpu_backends_count_the_materialised_probabilities(name, blocks, t, w):
    backend = get_backend(name)
    assert backend.attention_memory(blocks, t, w) == materialised(blocks, t)
    backend.finalize()


@pytest.mark.parametrize("blocks,t,w", SHAPES)
@pytest.mark.parametrize("attention", ["flash", "materialised"])
def test_the_cuda_backend_counts_what_its_path_keeps(emulated, blocks, t, w, attention):
    be, _ = emulated
    be.attention = attention
    takes_flash = attention == "flash" and w <= FLASH_MAX_WIDTH
    assert be.attention_memory(blocks, t, w) == (flash(blocks, t, w) if takes_flash else materialised(blocks, t))


@pytest.mark.parametrize("attention", ["flash", "materialised"])
def test_the_count_is_what_causal_attention_keeps(emulated, attention):
    """Beside q, k and v, `saved` holds flash's output and log-sum-exps, or the materialised probabilities."""
    be, _ = emulated
    be.attention = attention
    blocks, t, w = 3, 33, 16
    q = be.from_host(np.zeros((blocks, t, w)))
    _, (kind, saved) = be.causal_attention(q, q.copy(), q.copy(), 0.25)
    assert kind == attention
    kept = sum(a.size for a in saved[3:])  # flash: (q, k, v, out, lse); materialised: (q, k, v, probs)
    assert kept == be.attention_memory(blocks, t, w)[0]


@pytest.mark.parametrize("name", ["numpy", "cpu"])
@pytest.mark.parametrize("t", [9, 64])
def test_the_cpu_backends_keep_at_most_their_count(name, t):
    """NumPy keeps exactly the probabilities; the cpu backend's halves (from T = 64) keep about 3/4 of them,
    so for it the default's count is an upper bound."""
    backend = get_backend(name)
    blocks, w = 2, 8
    q = np.zeros((blocks, t, w), dtype=np.float32)
    _, saved = backend.causal_attention(q, q.copy(), q.copy(), 0.25)
    kept = sum(a.size for a in saved[3:])  # (q, k, v, probs), or the cpu backend's (q, k, v, early, late)
    counted = backend.attention_memory(blocks, t, w)[0]
    if name == "numpy" or t < 64:
        assert kept == counted
    else:
        assert 0.7 * counted < kept < counted
    backend.finalize()
