"""The key/value cache of one head group at one layer, and the attention of new tokens over it.

A `KVRing` holds `capacity` slots on the backend, position p in slot p % capacity, and each new token
attends to the positions of the last `window` (the model's seq_len) up to its own. A plain decoder
(model/transformer.py's `Decoder`) has capacity = window and feeds one token at a time; a speculative decoder
(model/lookahead/speculative.py) feeds a few drafted tokens at once and keeps window + drafts slots, so that
writing them never overwrites a key that an earlier one of them still sees, and so that dropping the
rejected ones (by moving the position back) leaves every kept key in place.
"""

from __future__ import annotations

import numpy as np

from microgpt.backends.base import Backend
from microgpt.model.attention import HeadGroup


class KVRing:
    """One head group's keys and values at one layer: rings of `capacity` slots, position p in slot p % capacity."""

    def __init__(self, backend: Backend, group: HeadGroup, capacity: int, window: int | None = None):
        self.be = backend
        self.capacity = capacity
        self.window = capacity if window is None else window  # positions a token sees, its own included
        if not 1 <= self.window <= capacity:
            raise ValueError(f"a KV ring of {capacity} slots cannot show a window of {self.window} positions")
        self.keys = backend.zeros((group.count, capacity, group.width))  # (G, capacity, w)
        self.values = backend.zeros((group.count, capacity, group.width))  # (G, capacity, w)

    def attend(self, queries, keys, values, start: int, scale: float):
        """Store keys and values (G, n, w) of positions start .. start + n - 1, and return the attention output
        (G, n, w) of the queries (G, n, w) at those positions, each over the positions it sees.

        A prompt (start 0, at most `window` tokens) is one causal attention over the keys it wrote; a new token,
        or a few at once, is the backend's window_attention over the ring, each over its own window.
        """
        self.store(keys, values, start)
        if start == 0:  # a prompt: each token sees the ones before it, in the first slots
            return self.be.causal_attention(queries, keys, values, scale)[0]  # (G, n, w)
        return self.be.window_attention(queries, self.keys, self.values, start, self.window, scale)  # (G, n, w)

    def attend_last(self, query, keys, values, start: int, scale: float):
        """Store keys and values (G, n, w) of positions start .. start + n - 1 and return the attention output
        (G, 1, w) of the last position's query (G, 1, w) alone (the others' are not wanted)."""
        self.store(keys, values, start)
        return self.be.window_attention(query, self.keys, self.values, start + keys.shape[1] - 1, self.window, scale)

    def store(self, keys, values, start: int) -> None:
        """Write keys and values (G, n, w) of positions start .. start + n - 1 into their slots."""
        n = keys.shape[1]
        if start == 0 and n > self.window:
            raise ValueError(f"a prompt of {n} tokens is longer than the window of {self.window}; crop it")
        if start > 0 and n > self.capacity - self.window + 1:
            raise ValueError(f"{n} new tokens would overwrite keys that the first of them sees: the ring has "
                             f"{self.capacity} slots for a window of {self.window}")
        slots = np.arange(start, start + n) % self.capacity  # (n,)
        if slots[-1] - slots[0] == n - 1:  # no wrap: one slice
            self.keys[:, slots[0] : slots[0] + n] = keys
            self.values[:, slots[0] : slots[0] + n] = values
        else:
            self.keys[:, slots] = keys
            self.values[:, slots] = values
