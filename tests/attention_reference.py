"""Causal attention and its gradients in float64, straight from the formulas, for the CUDA attention tests."""

from __future__ import annotations

import numpy as np


def attention_reference(q, k, v, dout, scale):
    """(out, dq, dk, dv) for q, k, v, dout of shape (n, T, w): query i sees keys 0 .. i."""
    t = q.shape[1]
    scores = np.einsum("ntw,nsw->nts", q, k) * scale
    scores[:, np.triu(np.ones((t, t), dtype=bool), k=1)] = -np.inf
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
