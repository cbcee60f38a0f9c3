"""The key/value cache of one head group at one layer, and the attention of new tokens over it.

A `KVRing` holds `capacity` slots on the backend, position p in slot p % capacity, and each new token
attends to the positions of the last `window` (the model's seq_len) up to its own. A plain decoder
(model/gpt/decode.py) has capacity = window and feeds one token at a time; a speculative decoder
(model/lookahead/speculative.py) feeds a few drafted tokens at once and keeps window + drafts slots, so that
writing them never overwrites a key that an earlier one of them still sees, and so that dropping the
rejected ones (by moving the position back) leaves every kept key in place.
"""

from __future__ import annotations

import numpy as np

from microgpt.backends.base import Backend
from microgpt.backends.constants import MASKED_SCORE
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
        self._bands: dict[tuple[int, int], object] = {}  # (n, older keys) -> the band mask of n queries past the window

    def attend(self, queries, keys, values, start: int, scale: float):
        """Store keys and values (G, n, w) of positions start .. start + n - 1, and return the attention output
        (G, n, w) of the queries (G, n, w) at those positions, each over the positions it sees.

        While every new token sees every position before it (the context fits in the window), or for one
        token, that is one causal attention over the keys held; past it, several tokens attend at once, each to
        its own window, under a band mask. A prompt (start 0) holds at most `window` tokens.
        """
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
        if n == 1 or start + n <= self.window:
            seen = self._seen(start + n - 1)
            out, _ = self.be.causal_attention(queries, self.keys[:, seen].copy(), self.values[:, seen].copy(), scale)
            return out  # (G, n, w)
        return self._banded(queries, start, scale)

    def _banded(self, queries, start: int, scale: float):
        """Attention (G, n, w) of n queries at positions start.. past the window, each over its own last `window`
        positions: one product over the union of their windows, in position order, with every key outside a
        query's own window masked (MASKED_SCORE, so its probability is exactly 0)."""
        be, n = self.be, queries.shape[1]
        first = max(0, start - self.window + 1)  # the oldest position the first query sees (none before 0)
        slots = np.arange(first, start + n) % self.capacity  # (start - first + n,)
        keys, values = self.keys[:, slots], self.values[:, slots]  # each (G, held, w)
        scores = be.bmm(queries, keys, False, True)  # (G, n, held)
        groups, _, held = scores.shape
        scaled = be.scale(scores.reshape(groups * n, held), scale)  # (G*n, held)
        be.add_(scaled, self._band(n, start - first))
        return be.bmm(be.softmax_rows(scaled).reshape(groups, n, held), values)  # (G, n, w)

    def _band(self, n: int, before: int):
        """The additive mask (G*n, before + n) of `_banded` for n queries after `before` older keys."""
        if (n, before) not in self._bands:
            behind = np.arange(n)[:, None] + before - np.arange(before + n)[None, :]  # (n, held): query less key
            outside = (behind < 0) | (behind > self.window - 1)  # (n, held): after itself, or before its window
            mask = np.where(outside, MASKED_SCORE, 0.0)  # (n, held)
            self._bands[(n, before)] = self.be.from_host(np.tile(mask, (self.keys.shape[0], 1)))
        return self._bands[(n, before)]

    def _seen(self, position: int):
        """The slots of the positions a token at `position` sees (the last `window` up to its own). For several
        tokens at once these are in position order; for the newest token alone, any order does (it sees every key
        given), so a ring as long as its window gives all its slots as they lie."""
        first = max(0, position - self.window + 1)
        if position < self.capacity:  # nothing has wrapped: slots are positions
            return slice(first, position + 1)
        if self.capacity == self.window:
            return slice(0, self.capacity)
        return np.arange(first, position + 1) % self.capacity  # (window,)
