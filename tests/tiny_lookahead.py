"""Tiny lookahead models, their weights moved off their init (so a dropped gain or bias shows): `tiny`, in float64
by default, and token windows for it, which the lookahead family's tests (tests/model/test_lookahead.py) and its
distillation's (test_lookahead_distill.py) train and check; `drafter`, three heads that draft, for the tests of
the draft stack (test_draft_stack.py, mode mtp) and of hydra drafting (test_hydra_draft.py)."""

from __future__ import annotations

import numpy as np

from microgpt.backends import get_backend
from microgpt.data.tokenizer import CharTokenizer
from microgpt.model.family import family

TOKENIZER = CharTokenizer("abcdefghijk")
V = TOKENIZER.size
TRUNK = {"d_model": 6, "n_layers": 2, "head_dims": (2, 4), "d_ff": 8, "seq_len": 7}


def tiny(backend=None, **settings):
    kind = family("lookahead")
    config = kind.Config(vocab_size=V, **{**TRUNK, **settings})
    model = kind.build(config, backend or get_backend("numpy", dtype=np.float64), TOKENIZER, 3)
    rng = np.random.default_rng(0)
    model.params.from_host({name: value + rng.normal(0, 0.3, value.shape)  # off the zero init of biases and norms
                            for name, value in model.params.to_host().items()})
    return model


def windows_of(seed: int = 1, batch: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, V, size=(batch, TRUNK["seq_len"] + 1))  # (B, T+1)


def drafter(backend, mode: str, **settings):
    kind = family("lookahead")
    config = kind.Config(vocab_size=TOKENIZER.size, **{"d_model": 10, "n_layers": 2, "head_dims": (4, 4, 2),
                                                      "d_ff": 12, "seq_len": 7, "lookahead": 3,
                                                      "lookahead_mode": mode, **settings})
    model = kind.build(config, backend, TOKENIZER, 3)
    rng = np.random.default_rng(2)
    model.params.from_host({n: v + rng.normal(0, 0.4, v.shape) for n, v in model.params.to_host().items()})
    return model
