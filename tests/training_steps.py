"""Training a model by hand, step by step, to hold two models to each other (a family and its graph):
`cut_windows` cuts seeded batches from a token stream, and `train_steps` gives each step's loss and metrics
(zero the gradients, one pass, one Adam step, as GPT.train_step)."""

from __future__ import annotations

import numpy as np


def cut_windows(tokens: np.ndarray, seq_len: int, steps: int, batch: int, rng) -> list[np.ndarray]:
    """`steps` batches (batch, seq_len + 1) cut from `tokens` at places drawn from `rng`."""
    starts = rng.integers(0, len(tokens) - seq_len - 1, size=(steps, batch))  # (steps, B)
    return [np.stack([tokens[s : s + seq_len + 1] for s in row]) for row in starts]


def train_steps(model, windows: list[np.ndarray], lr: float) -> list[tuple[float, dict]]:
    """(loss, metrics) of each step."""
    history = []
    for batch in windows:
        model.params.zero_grad()
        loss, metrics = model.loss_and_backward(batch)
        model.params.adam_step(lr)
        history.append((float(loss), {key: float(value) for key, value in metrics.items()}))
    return history
