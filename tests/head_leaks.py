"""`leaks(heads, ids)`: the check that no head sees the token it is asked to predict, nor any position it must
not see (`HeadLogits.hidden`, model/heads.py), by perturbing each input position and watching every head's
logits. tests/model/test_leaks.py holds every family's heads to it, and tests/graph/test_graph_lookahead.py a
graph's."""

from __future__ import annotations

import numpy as np

from family_shapes import VOCAB

ATOL = 1e-12  # float64: a leak moves logits by far more, rounding by far less


def leaks(heads, ids: np.ndarray) -> list[tuple[str, int, int]]:
    """(head, position t, offset o) wherever changing the token at t + o changes the head's logits at t, for each
    o the head must not see: its target's and its hidden ones. `heads(ids)` gives host HeadLogits for ids (B, T)."""
    batch, seq_len = ids.shape
    found = []
    before = {h.name: h for h in heads(ids)}
    rng = np.random.default_rng(0)
    for position in range(seq_len):
        changed = ids.copy()
        changed[:, position] = (ids[:, position] + rng.integers(1, VOCAB, size=batch)) % VOCAB  # every row differs
        after = {h.name: h.logits.reshape(batch, seq_len, -1) for h in heads(changed)}
        for name, head in before.items():
            first, last = head.hidden
            for t in range(seq_len):
                offset = position - t
                forbidden = offset == head.offset or (offset >= first and (last is None or offset <= last))
                old = head.logits.reshape(batch, seq_len, -1)[:, t]
                if forbidden and not np.allclose(after[name][:, t], old, rtol=0, atol=ATOL):
                    found.append((name, t, offset))
    return found
