"""Distillation of the draft heads toward the main head (--lookahead-distill B, mode mtp).

Head k at position t predicts the token at t + 1 + k, the token that the main head predicts at position t + k.
With B > 0 its loss is (1 - B) x the cross-entropy against the true token + B x the cross-entropy against the
main head's distribution there, softmax(main logits at t + k), held fixed (no gradient reaches the main head
through it). The soft target tells the head what the main head would say, which is what a draft is checked
against in `sample --speculative`.
"""

from __future__ import annotations

import numpy as np


def teacher_rows(main_probs, batch: int, seq_len: int, shift: int):
    """The main head's distributions (B*(T - shift), vocab) at positions shift .. T - 1 of each window, from
    main_probs (B*T, vocab): row (b, t) is what head k (shift = k) at (b, t) is taught."""
    vocab = main_probs.shape[1]
    kept = seq_len - shift
    return main_probs.reshape(batch, seq_len, vocab)[:, shift:].reshape(batch * kept, vocab)


def soft_cross_entropy_grad(be, logits, target_probs) -> tuple[float, object]:
    """(mean over rows of -sum_j p_j log softmax(logits)_j, its gradient (rows, vocab) for logits): the target
    distributions p (rows, vocab) are constants. The loss is summed on the host in float64."""
    rows = logits.shape[0]
    host_logits = be.to_host(logits).astype(np.float64)  # (rows, vocab)
    host_targets = be.to_host(target_probs).astype(np.float64)  # (rows, vocab)
    top = host_logits.max(axis=1, keepdims=True)  # (rows, 1)
    log_norm = top[:, 0] + np.log(np.exp(host_logits - top).sum(axis=1))  # (rows,)
    loss = float(np.mean(log_norm - (host_targets * host_logits).sum(axis=1)))  # the targets sum to 1 per row
    grad = be.softmax_rows(logits)  # (rows, vocab)
    be.add_(grad, be.scale(target_probs, -1.0))
    be.scale_(grad, 1.0 / rows)
    return loss, grad
