"""A decoder's face (`prefill`, `step`, `consumed`), which sampling takes whatever is behind it:

- `Rerun`, for any family: re-runs the model on the last seq_len tokens per token. A family without a cache
  returns one from `decoder()`, and `sample --no-cache` uses one for any family;
- `CachedDecoder`: the bookkeeping of a decoder with key/value caches (the next position, the context
  consumed, a prompt cropped to seq_len), around the family's own `_forward` (transformer.py's `Decoder`, graph/decode.py).
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


class CachedDecoder:
    """Position counters for one sequence; a subclass's `_forward(token_ids, start)` runs the new tokens (positions
    start .. start + n - 1) through its caches and returns backend logits (1, vocab) for the token after them."""

    def __init__(self, capacity: int):
        self.capacity = capacity  # seq_len: the positions a cache holds
        self.position = 0  # position of the next token (the first token in the cache is position 0)
        self.consumed = 0  # context tokens accounted for, including those a long prompt had cropped

    @property
    def length(self) -> int:
        """Tokens the cache holds: every one so far, up to seq_len."""
        return min(self.position, self.capacity)

    def prefill(self, token_ids) -> Mat:
        """Fill an empty cache with a prompt's last seq_len tokens in one batched forward; backend logits
        (1, vocab) for the token after the prompt."""
        token_ids = np.asarray(token_ids, dtype=np.int32).reshape(-1)  # (n,)
        if self.position:
            raise RuntimeError(f"prefill needs an empty cache, but it holds {self.length} tokens; make a new decoder")
        if len(token_ids) == 0:
            raise ValueError("prefill needs a prompt of at least one token")
        self.consumed = len(token_ids)
        return self._advance(token_ids[-self.capacity :])

    def step(self, token_id: int) -> Mat:
        """Append one token at the next position; backend logits (1, vocab) for the token after it."""
        self.consumed += 1
        return self._advance(np.array([token_id], dtype=np.int32))  # (1,)

    def _advance(self, token_ids: np.ndarray) -> Mat:
        logits = self._forward(token_ids, self.position)  # (1, vocab)
        self.position += len(token_ids)
        return logits
