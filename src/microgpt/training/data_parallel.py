"""Data-parallel training: the global batch split over ranks and micro-batches, and one step over it.

`--batch-size` is the global batch: ranks x `--grad-accum` micro-batches x the
micro-batch. `RankShare` wraps a batcher so that every rank draws the same
global batch a single process would draw and keeps its own contiguous share of
the rows; the batcher's state (the data position, the random state) stays the
global one, so a checkpoint resumes with any number of ranks. `train_step`
accumulates the micro-batches, averages the loss and the gradient over the
ranks, and takes the optimiser's step (optim.py) on every rank alike. It is
typed against the family protocol (model/family.py): any model's
`loss_and_backward` will do, or the trainer's `ThreadSplit` over it (the batch
split over the backend's threads, model/thread_split.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from microgpt.core.errors import ConfigError, Named, NonFiniteLoss
from microgpt.training.optim import Optimizer, StepInfo


def micro_batch_size(batch_size: int, grad_accum: int, ranks: int) -> int:
    """The sequences in one forward/backward pass; the global batch must split evenly."""
    parts = ranks * grad_accum
    if batch_size % parts:
        raise ConfigError(Named("batch_size", batch_size), " (the global batch) does not split evenly over "
                          f"{ranks} process{'es' if ranks > 1 else ''} x ", Named("grad_accum", grad_accum),
                          f"; use a multiple of {parts}")
    return batch_size // parts


class RankShare:
    """This rank's rows of each global batch that `batches` draws; its state is the global batcher's."""

    def __init__(self, batches, rank: int, ranks: int):
        self.batches, self.rank, self.ranks = batches, rank, ranks

    def next(self) -> np.ndarray:
        windows = self.batches.next()  # (global batch, seq_len + 1)
        share = len(windows) // self.ranks
        return windows[self.rank * share : (self.rank + 1) * share]

    def state(self) -> dict:
        return self.batches.state()

    def restore(self, state: dict) -> None:
        self.batches.restore(state)


@dataclass(frozen=True)
class StepResult:
    loss: float  # the global batch's mean loss
    stop: bool  # some rank asked to stop
    save: bool  # some rank asked to save and go on
    update: StepInfo  # the optimiser's step
    metrics: dict[str, float]  # the model's own per-step figures (this rank's micro-batches' mean), if any


def train_step(model, windows: np.ndarray, optimizer: Optimizer, comm, grad_accum: int = 1, stop: bool = False,
               save: bool = False) -> StepResult:
    """One step over this rank's windows in `grad_accum` micro-batches, through `model` (a model, or a ThreadSplit
    over it: the trainer's). With one process, no accumulation and the reference's Adam it is exactly a GPT's
    `train_step`.

    Each micro-batch's gradient is a mean over its tokens, so the sum over the micro-batches is scaled by
    1/grad_accum, and the all-reduce averages over the ranks: the mean over the global batch. A NaN or
    infinite loss on any rank raises NonFiniteLoss on every rank before the update. The optimiser then
    sees the averaged gradient, so clipping measures the global batch's norm, the same on every rank.
    """
    params = model.params
    params.zero_grad()
    if grad_accum == 1:
        loss, metrics = model.loss_and_backward(windows)
    else:
        results = [model.loss_and_backward(micro) for micro in np.split(windows, grad_accum)]
        loss = sum(r[0] for r in results) / grad_accum
        metrics = {key: sum(r[1][key] for r in results) / grad_accum for key in results[0][1]}
        model.be.scale_(params.grad, 1.0 / grad_accum)
    loss, stop, save = comm.agree(loss, stop, save)
    if not math.isfinite(loss):
        raise NonFiniteLoss(loss, params.step + 1)
    comm.allreduce_mean(params.grad)
    return StepResult(loss, stop, save, optimizer.step(), metrics)
