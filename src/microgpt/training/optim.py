"""The optimiser over the flat parameter store: learning-rate schedule, gradient clipping, Adam or AdamW.

`learning_rate(config, t)` is the schedule: a linear warm-up over `warmup`
steps, then constant or a cosine decay to `min_lr` at `decay_steps` (default:
`steps`). `Optimizer.step()`, after a backward, takes one update of every
parameter: with the reference's betas and no decay or clipping it is the
reference's op, `Backend.adam_step` (so such a run is bit-identical to one
from before these settings existed); otherwise one `Backend.adamw_step` over
the flat buffers, with the gradients scaled to `grad_clip` where the global
L2 norm of the trainable ones is above it, decoupled weight decay where a
parameter's spec says it decays (the weight matrices), and frozen parameters
(a spec with trainable False) left exactly as they are: two masks over the
flat store. The schedule depends only on the step and the settings, so a
resumed run continues it exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from microgpt.backends.constants import ADAM_BETA1, ADAM_BETA2
from microgpt.model.params import Parameters
from microgpt.settings.presets import REFERENCE_OPTIMIZER
from microgpt.settings.training import TrainConfig

CLIP_EPS = 1e-6  # added to the norm before dividing, as torch.nn.utils.clip_grad_norm_ does


def learning_rate(config: TrainConfig, t: int) -> float:
    """The learning rate of step t (t = 1 for the first step)."""
    if t <= config.warmup:
        return config.lr * t / config.warmup
    if config.lr_schedule == "constant":
        return config.lr
    min_lr = config.lr / 10 if config.min_lr is None else config.min_lr
    end = config.decay_steps or config.steps
    if t >= end:
        return min_lr
    progress = (t - config.warmup) / (end - config.warmup)  # in (0, 1)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (config.lr - min_lr)


def grad_norm(params: Parameters) -> float:
    """The global L2 norm of the trainable parameters' gradients: grad @ grad^T over each run of adjacent
    trainable parameters (one reduction over the whole buffer when all of them train)."""
    squares = 0.0
    for start, stop in params.trainable_runs():
        grad = params.grad[:, start:stop]  # (1, run)
        squares += float(params.backend.to_host(params.backend.matmul(grad, grad, transpose_b=True))[0, 0])
    return math.sqrt(squares)


@dataclass(frozen=True)
class StepInfo:
    lr: float  # the learning rate the step used
    grad_norm: float | None  # the gradients' global norm before clipping (with grad_clip only)


class Optimizer:
    """One update of every parameter per `step()`, as the training settings ask."""

    def __init__(self, params: Parameters, config: TrainConfig):
        self.params, self.config = params, config
        self.plain = ((config.beta1, config.beta2) == (ADAM_BETA1, ADAM_BETA2) and config.weight_decay == 0
                      and config.grad_clip is None and params.all_trainable)
        self.decay_mask = None if self.plain else params.mask("decay")  # (1, total)
        self.train_mask = None if self.plain else params.mask("trainable")  # (1, total)

    @classmethod
    def reference(cls, params: Parameters, lr: float) -> Optimizer:
        """The reference's optimiser: Adam at one fixed lr, no warm-up, decay or clipping."""
        return cls(params, TrainConfig(**{**REFERENCE_OPTIMIZER, "lr": lr, "warmup": 0}))

    def step(self) -> StepInfo:
        """Update every parameter from params.grad (left as it is) and count the step."""
        p, cfg = self.params, self.config
        lr = learning_rate(cfg, p.step + 1)
        if self.plain:
            p.adam_step(lr)
            return StepInfo(lr, None)
        norm, scale = None, 1.0
        if cfg.grad_clip is not None:
            norm = grad_norm(p)
            scale = min(1.0, cfg.grad_clip / (norm + CLIP_EPS))
        p.step += 1
        p.backend.adamw_step(p.data, p.grad, p.m, p.v, self.decay_mask, self.train_mask, lr, p.step, cfg.beta1,
                             cfg.beta2, cfg.weight_decay, scale)
        return StepInfo(lr, norm)
