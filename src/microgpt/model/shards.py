"""One batch split over the backend's streams: a shard of sequences per stream, run at once.

Every family gets this by building its passes with `Sharded`: `bind(views)` makes the family's layers over
the model's weights, adding their gradients into `views.gradient`. With one stream (numpy, cuda) the passes
run on the model's own gradient buffer; with several (the cpu backend: one per thread) the batch is cut into
contiguous shards, each runs through layers bound to a row of its own in a (shards, total) gradient buffer,
and the rows are added into params.grad weighted by each shard's share of the sequences, in shard order.
That is the batch's mean summed in another order than one pass would sum it: the same seed and thread count
give the same bits, another thread count agrees to rounding.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np

from microgpt.backends.base import Backend
from microgpt.model.params import Parameters, ParameterViews


def shard_count(backend: Backend, batch: int) -> int:
    """How many shards a batch of `batch` sequences is split into: one per backend stream, at most one per
    sequence."""
    return max(1, min(backend.streams, batch))


class Sharded:
    """`loss` and `loss_and_backward` over windows (B, T+1), split over the backend's streams.

    `bind(views)` returns an object whose `loss(windows)` and `loss_and_backward(windows)` run one pass over
    the weights of `views.value`, adding gradients into `views.gradient`; `loss_and_backward` returns the
    mean loss or (the mean loss, a dict of per-step metrics), and the shards' metrics are combined as
    their losses are.
    """

    def __init__(self, params: Parameters, bind: Callable[[ParameterViews], object]):
        self.params, self.be, self.bind = params, params.backend, bind
        self.own = bind(ParameterViews(params.value, params.gradient))  # the passes into params.grad
        self._grads = None  # (shards, total): each shard's gradient, made on first use for that many shards
        self._shard_passes: list = []  # the passes of each shard, adding into its row of _grads

    def split(self, windows: np.ndarray) -> list[np.ndarray]:
        """windows (B, T+1) as contiguous shards of sequences, one per backend stream (at most B)."""
        count = shard_count(self.be, len(windows))
        return np.array_split(windows, count) if count > 1 else [windows]

    def _passes_for(self, count: int) -> list:
        """Passes for `count` shards, each adding into its row of _grads (made for count rows when another count
        is asked for), zeroed here."""
        if self._grads is None or self._grads.shape[0] != count:
            self._grads = self.be.zeros((count, self.params.total))  # (shards, total)
            self._shard_passes = [
                self.bind(ParameterViews(self.params.value, self.params.gradient_views(self._grads[i : i + 1])))
                for i in range(count)
            ]
        else:
            self.be.zero_(self._grads)
        return self._shard_passes

    def loss(self, windows: np.ndarray) -> float:
        """Mean loss of windows (B, T+1), forward only, its shards at once."""
        windows = np.asarray(windows)
        shards = self.split(windows)
        if len(shards) == 1:
            return self.own.loss(windows)
        losses = self.be.run_streams([partial(self.own.loss, shard) for shard in shards])
        return weighted_mean(losses, shards)

    def loss_and_backward(self, windows: np.ndarray) -> tuple[float, dict[str, float]]:
        """(mean loss of windows (B, T+1), the passes' metrics); adds every parameter gradient into params.grad."""
        windows = np.asarray(windows)
        shards = self.split(windows)
        if len(shards) == 1:
            return self.own.loss_and_backward(windows)
        passes = self._passes_for(len(shards))
        results = self.be.run_streams([partial(shard_passes.loss_and_backward, shard)
                                       for shard_passes, shard in zip(passes, shards)])
        self.be.add_weighted_(self.params.grad, self._grads, [len(shard) / len(windows) for shard in shards])
        metrics = {key: weighted_mean([r[1][key] for r in results], shards) for key in results[0][1]}
        return weighted_mean([r[0] for r in results], shards), metrics


def weighted_mean(values: list[float], shards: list[np.ndarray]) -> float:
    """The batch's mean from its shards' means, each weighted by its share of the sequences, in order."""
    total = sum(len(shard) for shard in shards)
    return sum(value * (len(shard) / total) for value, shard in zip(values, shards))
