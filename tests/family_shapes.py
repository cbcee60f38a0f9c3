"""A small shape for every registered family (a model of a few hundred parameters), for the tests that hold
every family to a rule (test_causality.py, test_leaks.py): a family registered without one fails them, so a new
family cannot skip the checks. VARIANTS adds the shapes of a family's other modes."""

from __future__ import annotations

VOCAB = 11
TINY = {  # family -> its shape settings
    "gpt": {"d_model": 6, "n_layers": 2, "head_dims": (2, 4), "d_ff": 8, "seq_len": 9},
    "ensemble": {"cooperative": "d4n1,d2+2n1", "stream_dim": 5, "prior": "counter", "router": "gated", "seq_len": 9},
    "lookahead": {"d_model": 6, "n_layers": 2, "head_dims": (2, 4), "d_ff": 8, "seq_len": 9, "lookahead": 3},
}
VARIANTS = [(name, shape) for name, shape in TINY.items()] + [  # (family, shape): every head kind there is
    ("lookahead", {**TINY["lookahead"], "lookahead_mode": "gap", "head_layers": 2}),
]
