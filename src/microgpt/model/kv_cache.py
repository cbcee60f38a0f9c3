"""The key/value cache of one head group at one layer: a ring of seq_len slots on the backend."""

from __future__ import annotations

from microgpt.backends.base import Backend
from microgpt.model.attention import HeadGroup


class KVRing:
    """One head group's keys and values at one layer: rings of `capacity` slots, position p in slot p % capacity."""

    def __init__(self, backend: Backend, group: HeadGroup, capacity: int):
        self.capacity = capacity
        self.keys = backend.zeros((group.count, capacity, group.width))  # (G, seq_len, w)
        self.values = backend.zeros((group.count, capacity, group.width))  # (G, seq_len, w)

    def add(self, keys, values, start: int):
        """Store keys and values (G, n, w) of positions start .. start + n - 1, and return (G, held, w) copies
        of every key and value held: what the new tokens attend to.

        Either start is 0 (a prompt of at most `capacity` tokens) or n is 1, so the new rows never wrap
        around. Past `capacity` the slots are not in position order, which does not matter for one new
        token: it sees every key.
        """
        n = keys.shape[1]
        slot = start % self.capacity  # where the new rows go
        held = min(start + n, self.capacity)  # slots in use after this call
        self.keys[:, slot : slot + n] = keys
        self.values[:, slot : slot + n] = values
        return self.keys[:, :held].copy(), self.values[:, :held].copy()  # each (G, held, w)
