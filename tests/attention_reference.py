"""Causal and gap attention and their gradients in float64, straight from the formulas, for the CUDA attention tests."""

from __future__ import annotations

import numpy as np


def attention_reference(q, k, v, dout, scale, gap=None):
    """(out, dq, dk, dv) for q, k, v, dout of shape (n, T, w): query i sees keys 0 .. i, and with a gap also the
    keys i + gap + 1 .. T - 1 after the gap's hidden i + 1 .. i + gap."""
    t = q.shape[1]
    hidden = np.triu(np.ones((t, t), dtype=bool), k=1)  # (T, T): j > i
    if gap is not None:
        hidden &= ~np.triu(np.ones((t, t), dtype=bool), k=gap + 1)  # but not j >= i + gap + 1
    scores = np.einsum("ntw,nsw->nts", q, k) * scale
    scores[:, hidden] = -np.inf
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    dprobs = np.einsum("ntw,nsw->nts", dout, v)
    dscores = probs * (dprobs - (dprobs * probs).sum(-1, keepdims=True)) * scale
    return (
        probs @ v,
        dscores @ k,
        np.einsum("nts,ntw->nsw", dscores, q),
        np.einsum("nts,ntw->nsw", probs, dout),
    )
