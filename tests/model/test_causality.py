"""No family sees a token it is asked to predict: for every registered family, the logits at positions <= t
do not change when the tokens after t do.

Each family needs a small shape in tests/family_shapes.py; a family registered without one fails the first
test, so a new family cannot skip the check.
"""

from __future__ import annotations

import numpy as np
import pytest

from family_shapes import TINY, VARIANTS, VOCAB
from microgpt.backends import get_backend
from microgpt.core.registry import FAMILIES
from microgpt.data.tokenizer import CharTokenizer
from microgpt.model.family import family


def test_every_family_has_a_tiny_shape_here():
    assert set(FAMILIES) <= set(TINY), f"add a small shape for {sorted(set(FAMILIES) - set(TINY))} to TINY"


@pytest.mark.parametrize(("name", "shape"), VARIANTS)
@pytest.mark.parametrize("t", [0, 3, 7])
def test_later_tokens_never_change_earlier_logits(name, shape, t):
    kind = family(name)
    be = get_backend("numpy", dtype=np.float64)  # float64: a leak would show far above rounding
    config = kind.Config(vocab_size=VOCAB, **shape)
    model = kind.build(config, be, CharTokenizer("abcdefghijk"), 3)
    rng = np.random.default_rng(t)
    ids = rng.integers(0, VOCAB, size=(3, config.seq_len))  # (B, T)
    changed = ids.copy()
    changed[:, t + 1 :] = (ids[:, t + 1 :] + rng.integers(1, VOCAB, size=ids[:, t + 1 :].shape)) % VOCAB  # all differ
    before = be.to_host(model.logits(ids)).reshape(3, config.seq_len, VOCAB)  # (B, T, V)
    after = be.to_host(model.logits(changed)).reshape(3, config.seq_len, VOCAB)
    np.testing.assert_allclose(after[:, : t + 1], before[:, : t + 1], rtol=0, atol=1e-12)
    if t + 1 < config.seq_len:
        assert not np.allclose(after[:, t + 1 :], before[:, t + 1 :])  # the change reached the later positions
