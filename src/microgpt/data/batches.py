"""Token windows for training: the sequential walk and seeded random windows.

`SequentialBatches` walks the tokens in order (window b of a batch starts b
strides after window 0; stride seq_len by default, so each token is seen once
per epoch, then wraps and counts an epoch); `RandomBatches` draws seeded random
windows. Both yield (batch, seq_len + 1) windows: inputs are [:, :-1], targets
[:, 1:], and both save and restore their position with a checkpoint.
"""

from __future__ import annotations

import numpy as np

from microgpt.data.corpus import check_length


class SequentialBatches:
    """B windows at pos, pos + stride, ...; then pos += B * stride; wraps to 0 (epoch + 1)."""

    def __init__(self, tokens: np.ndarray, seq_len: int, batch_size: int, stride: int | None = None):
        check_length(tokens, seq_len, "the training text")
        self.tokens, self.seq_len, self.batch_size = tokens, seq_len, batch_size
        self.stride = stride or seq_len
        self.position = 0
        self.epoch = 0

    def next(self) -> np.ndarray:
        rows = []  # each (seq_len + 1,)
        for _ in range(self.batch_size):
            if self.position + self.seq_len + 1 > len(self.tokens):
                self.position = 0
                self.epoch += 1
            rows.append(self.tokens[self.position : self.position + self.seq_len + 1])
            self.position += self.stride
        return np.stack(rows)  # (batch, seq_len + 1)

    def state(self) -> dict:
        return {"kind": "sequential", "position": self.position, "epoch": self.epoch}

    def restore(self, state: dict) -> None:
        self.position, self.epoch = int(state["position"]), int(state["epoch"])


class RandomBatches:
    """Seeded random windows; the generator's state is saved with a checkpoint so a resume continues it."""

    def __init__(self, tokens: np.ndarray, seq_len: int, batch_size: int, seed: int):
        check_length(tokens, seq_len, "the training text")
        self.tokens, self.seq_len, self.batch_size = tokens, seq_len, batch_size
        self.rng = np.random.default_rng(seed)

    def next(self) -> np.ndarray:
        starts = self.rng.integers(0, len(self.tokens) - self.seq_len, size=self.batch_size)
        return np.stack([self.tokens[s : s + self.seq_len + 1] for s in starts])  # (batch, seq_len + 1)

    def state(self) -> dict:
        return {"kind": "random", "rng": self.rng.bit_generator.state}

    def restore(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]
