"""Drafting with hydra heads (model/lookahead/hydra_draft.py's HydraStack is the specification): greedy, every
head in one call (`greedy_drafts`); above temperature 0, one call a head (`head_logits`), the sampler drawing
each draft between them.

Head k (from 0) reads the trunk's state x and the tokens before its own draft (the next token and the drafts of
heads 0 .. k - 1): per layer l, pre = norm(y) W_state + b_state + sum_j tables[at[k, l] + j][token j], y += relu(pre)
W2 + b2; then logits = norm(y) W_out + b_out, its draft their argmax (the first of equal ones, as np.argmax).
The LayerNorms' gains and biases are folded into the weights after them, so norm is without either.
"""

from __future__ import annotations

import numpy as np

from microgpt.backends.cpu_kernels.jit import inline, kernel


@inline()
def _normalize(y, eps, out):
    """out = (y - mean(y)) / sqrt(var(y) + eps), over the vector y (d,)."""
    d = y.shape[0]
    inv_d = y.dtype.type(1) / y.dtype.type(d)
    total = y.dtype.type(0)
    for i in range(d):
        total += y[i]
    mean = total * inv_d
    squares = y.dtype.type(0)
    for i in range(d):
        centred = y[i] - mean
        squares += centred * centred
    inv = y.dtype.type(1) / np.sqrt(squares * inv_d + eps)
    for i in range(d):
        out[i] = (y[i] - mean) * inv


@inline()
def _head(x, tokens, k, state_w, state_b, tables, at, w2, b2, out_w, out_b, eps, y, normed, pre, logits):
    """Head k's logits (vocab,), written, reading the tokens tokens[0 .. k]; y, normed (d,) and pre (d_ff,) are
    scratch."""
    d, layers, d_ff, vocab = x.shape[0], state_w.shape[1], state_w.shape[3], out_w.shape[2]
    y[:] = x
    for layer in range(layers):
        _normalize(y, eps, normed)
        pre[:] = state_b[k, layer]
        for i in range(d):
            v = normed[i]
            for f in range(d_ff):
                pre[f] += v * state_w[k, layer, i, f]
        for j in range(k + 1):
            row = tables[at[k, layer] + j, tokens[j]]
            for f in range(d_ff):
                pre[f] += row[f]
        for i in range(d):
            y[i] += b2[k, layer, i]
        for f in range(d_ff):
            v = pre[f]
            if v > 0:
                for i in range(d):
                    y[i] += v * w2[k, layer, f, i]
    _normalize(y, eps, normed)
    logits[:] = out_b[k]
    for i in range(d):
        v = normed[i]
        for c in range(vocab):
            logits[c] += v * out_w[k, i, c]


@kernel()
def head_logits(x, tokens, k, state_w, state_b, tables, at, w2, b2, out_w, out_b, eps, logits):
    """Head k's logits (vocab,), written, for the trunk's state x (d,) and tokens (at least k + 1: the next token
    and the drafts of heads 0 .. k - 1); the arrays as greedy_drafts takes them."""
    d, d_ff = x.shape[0], state_w.shape[3]
    _head(x, tokens, k, state_w, state_b, tables, at, w2, b2, out_w, out_b, eps, np.empty(d, x.dtype),
          np.empty(d, x.dtype), np.empty(d_ff, x.dtype), logits)


@kernel()
def greedy_drafts(x, token, count, state_w, state_b, tables, at, w2, b2, out_w, out_b, eps, drafts, logits):
    """drafts (count,) and logits (count, vocab), written, for the trunk's state x (d,) and the next token:
    state_w (K, L, d, d_ff), state_b (K, L, d_ff), tables (n, vocab, d_ff), at (K, L), w2 (K, L, d_ff, d),
    b2 (K, L, d), out_w (K, d, vocab), out_b (K, vocab); eps in x's dtype."""
    d, d_ff, vocab = x.shape[0], state_w.shape[3], out_w.shape[2]
    y, normed, pre = np.empty(d, x.dtype), np.empty(d, x.dtype), np.empty(d_ff, x.dtype)
    tokens = np.empty(count + 1, np.int64)
    tokens[0] = token
    for k in range(count):
        _head(x, tokens, k, state_w, state_b, tables, at, w2, b2, out_w, out_b, eps, y, normed, pre, logits[k])
        best = 0
        for c in range(1, vocab):
            if logits[k, c] > logits[k, best]:
                best = c
        tokens[k + 1] = best
        drafts[k] = best
