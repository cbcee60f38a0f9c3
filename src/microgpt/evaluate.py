"""Held-out evaluation: negative log-likelihood, perplexity and bits per character of a text.

Every position t from seq_len on is scored once, with the seq_len characters
before it as context: -log p(text[t] | text[t - seq_len : t]). Windows are
batched (many per forward); only the last row of each window's logits is read
back, and the log-softmax and the sum run on the host in float64.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass

import numpy as np

from microgpt.data import DataError
from microgpt.model import GPT
from microgpt.sample import UnsoundOutputs


@dataclass(frozen=True)
class Evaluation:
    positions: int  # characters scored
    nll: float  # mean negative log-likelihood per character, in nats
    seconds: float

    @property
    def perplexity(self) -> float:
        """exp(nll); infinite for a model so bad that exp overflows (nll past about 709 nats)."""
        return math.exp(self.nll) if self.nll < math.log(sys.float_info.max) else math.inf

    @property
    def bits_per_char(self) -> float:
        return self.nll / math.log(2)


def scorable_positions(n_tokens: int, seq_len: int, what: str = "the text") -> int:
    """How many positions a text of n_tokens has with a full seq_len context; a DataError when none."""
    if n_tokens < seq_len + 1:
        raise DataError(
            f"{what} has {n_tokens} characters, fewer than seq_len + 1 = {seq_len + 1}: the model reads "
            f"{seq_len} characters of context before each one it scores; give a longer text"
        )
    return n_tokens - seq_len


def evaluate(model: GPT, tokens: np.ndarray, batch_size: int = 32, max_positions: int | None = None,
             what: str = "the text") -> Evaluation:
    """Mean NLL of tokens[t] given tokens[t - seq_len : t], for t = seq_len, seq_len + 1, ... (at most max_positions)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    seq_len = model.config.seq_len
    tokens = np.asarray(tokens, dtype=np.int32)
    positions = scorable_positions(len(tokens), seq_len, what)
    if max_positions is not None:
        positions = min(positions, max_positions)
    start = time.perf_counter()
    total = 0.0  # float64 sum of -log p over the scored positions
    for first in range(seq_len, seq_len + positions, batch_size):
        targets = np.arange(first, min(first + batch_size, seq_len + positions))  # (B,) positions scored
        windows = tokens[targets[:, None] + np.arange(-seq_len, 0)[None, :]]  # (B, T) contexts
        logits = model.logits(windows).reshape(len(targets), seq_len, -1)[:, -1].copy()  # (B, vocab)
        total += float(np.sum(nll_rows(model.be.to_host(logits), tokens[targets])))
    model.be.sync()
    if not math.isfinite(total):
        raise UnsoundOutputs(f"the model's outputs on {what} are not finite; its weights are unusable, retrain it "
                             "(with a lower --lr if it diverged)")
    return Evaluation(positions=positions, nll=total / positions, seconds=time.perf_counter() - start)


def nll_rows(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """-log softmax(logits)[target] per row, in float64: logits (rows, vocab), targets (rows,)."""
    logits = np.asarray(logits, dtype=np.float64)
    top = logits.max(axis=1, keepdims=True)  # (rows, 1)
    log_sum = top[:, 0] + np.log(np.exp(logits - top).sum(axis=1))  # (rows,)
    return log_sum - logits[np.arange(len(targets)), targets]
