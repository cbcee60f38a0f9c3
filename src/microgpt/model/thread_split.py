"""One batch split over the backend's threads: a slice of sequences per thread, run at once, for every family.

The trainer makes one `ThreadSplit` over its model and runs each step and each validation through it
(training/); exact evaluation splits its windows with `in_slices` (use/evaluate.py). A family only gives
`with_gradients(views)`: the same model over the same weights, adding its gradients into views.gradient.

With one stream (numpy, cuda) a batch runs in one pass on the model itself. With several (the cpu backend:
one per thread) the batch is cut into contiguous slices, one per thread; each runs through the model bound to
a row of its own in a (slices, total) gradient buffer, and the rows are added into params.grad weighted by
each slice's share of the sequences, in slice order. That is the batch's mean summed in another order than
one pass would sum it: the same seed and thread count give the same bits, another thread count agrees to
rounding.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np

from microgpt.backends.base import Backend
from microgpt.model.params import ParameterViews


def slice_count(backend: Backend, batch: int) -> int:
    """How many slices a batch of `batch` sequences is cut into: one per backend stream, at most one per sequence."""
    return max(1, min(backend.streams, batch))


def thread_slices(backend: Backend, rows: np.ndarray) -> list[np.ndarray]:
    """rows (B, ...) as contiguous slices of sequences, one per backend stream (at most B)."""
    count = slice_count(backend, len(rows))
    return np.array_split(rows, count) if count > 1 else [rows]


def in_slices(backend: Backend, run: Callable[[np.ndarray], object], rows: np.ndarray) -> list:
    """run(slice) for each thread's slice of rows (B, ...), at once; the results in slice order (a forward only:
    every slice reads the same weights and writes nothing they share)."""
    return backend.run_streams([partial(run, part) for part in thread_slices(backend, np.asarray(rows))])


def weighted_mean(values: list[float], slices: list[np.ndarray]) -> float:
    """The batch's mean from its slices' means, each weighted by its share of the sequences, in order."""
    total = sum(len(part) for part in slices)
    return sum(value * (len(part) / total) for value, part in zip(values, slices))


class ThreadSplit:
    """A model's `loss` and `loss_and_backward` over windows (B, T+1), split over the backend's threads.

    It offers what the trainer reads of a model (`params`, `be`, `loss`, `loss_and_backward`), so a training
    step takes either. `loss_and_backward` returns (the mean loss, the model's per-step metrics), the slices'
    metrics combined as their losses are.
    """

    def __init__(self, model):
        self.model, self.params, self.be = model, model.params, model.be
        self._grads = None  # (slices, total): each slice's gradient, made on first use for that many slices
        self._bound: list = []  # the model bound to each row of _grads

    def _bound_for(self, count: int) -> list:
        """The model bound to each of `count` rows of _grads (made for count rows when another count is asked
        for), zeroed here."""
        if self._grads is None or self._grads.shape[0] != count:
            self._grads = self.be.zeros((count, self.params.total))  # (slices, total)
            self._bound = [
                self.model.with_gradients(ParameterViews(self.params.value,
                                                         self.params.gradient_views(self._grads[i : i + 1])))
                for i in range(count)
            ]
        else:
            self.be.zero_(self._grads)
        return self._bound

    def loss(self, windows: np.ndarray) -> float:
        """Mean loss of windows (B, T+1), forward only, its slices at once."""
        slices = thread_slices(self.be, np.asarray(windows))
        if len(slices) == 1:
            return self.model.loss(slices[0])
        return weighted_mean(self.be.run_streams([partial(self.model.loss, part) for part in slices]), slices)

    def loss_and_backward(self, windows: np.ndarray) -> tuple[float, dict[str, float]]:
        """(mean loss of windows (B, T+1), the model's metrics); adds every parameter gradient into params.grad."""
        windows = np.asarray(windows)
        slices = thread_slices(self.be, windows)
        if len(slices) == 1:
            return self.model.loss_and_backward(windows)
        bound = self._bound_for(len(slices))
        results = self.be.run_streams([partial(model.loss_and_backward, part) for model, part in zip(bound, slices)])
        self.be.add_weighted_(self.params.grad, self._grads, [len(part) / len(windows) for part in slices])
        metrics = {key: weighted_mean([r[1][key] for r in results], slices) for key in results[0][1]}
        return weighted_mean([r[0] for r in results], slices), metrics
