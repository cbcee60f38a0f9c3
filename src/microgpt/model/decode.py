"""Decoding without a cache, for any family: `Rerun` re-runs the model on the last seq_len tokens per token.

It has a cached decoder's face (`prefill`, `step`, `consumed`), so sampling takes either: a family without
a cache returns a `Rerun` from `decoder()`, and `sample --no-cache` uses one for any family.
"""

from __future__ import annotations

import numpy as np

from microgpt.backends.base import Mat


class Rerun:
    """The context so far; each call runs the model over its last seq_len tokens."""

    def __init__(self, model):
        self.model = model
        self.context: list[int] = []

    @property
    def consumed(self) -> int:
        """Context tokens seen so far."""
        return len(self.context)

    def prefill(self, token_ids) -> Mat:
        """Backend logits (1, vocab) for the token after a prompt (host ids (n,), n >= 1)."""
        if self.context:
            raise RuntimeError(f"prefill needs an empty context, but it holds {len(self.context)} tokens")
        token_ids = [int(t) for t in np.asarray(token_ids).reshape(-1)]
        if not token_ids:
            raise ValueError("prefill needs a prompt of at least one token")
        self.context = token_ids
        return self._next()

    def step(self, token_id: int) -> Mat:
        """Append one token; backend logits (1, vocab) for the token after it."""
        self.context.append(int(token_id))
        return self._next()

    def _next(self) -> Mat:
        window = np.array(self.context[-self.model.config.seq_len :], dtype=np.int32)[None, :]  # (1, T)
        return self.model.logits(window)[-1:]  # (1, vocab)
