"""How often a run validates by default: as often as keeps validation a bounded share of the run's work.

A validation pass reads all of the held-out windows (so every pass, and every run, measures the same thing).
Without --eval-every a run validates every `TrainConfig.validate_every` steps (a twentieth of --steps, at
least 10 apart), or further apart where that many passes would read more than VALIDATION_SHARE of the
tokens the run trains on: a short run with a long held-out text validates fewer times (at least once, at
its end). A pass's forward costs about a third of a training step per token (no backward, no update), so
validation takes about VALIDATION_SHARE / 3 of a run's time at most (docs/training.md; measured in
docs/benchmarks.md). The interval follows from the run's settings alone, so a resume keeps it.
"""

from __future__ import annotations

from microgpt.settings.training import VALIDATION_SHARE, TrainConfig


def validation_every(config: TrainConfig, seq_len: int) -> int:
    """Steps between validations (0: by time, every --val-interval seconds): --eval-every where given, else
    `config.validate_every` widened until the run's passes read at most VALIDATION_SHARE of its training tokens."""
    every = config.validate_every
    if config.eval_every is not None or not every or not config.val_tokens:
        return every
    pass_tokens = (config.val_tokens - 1) // seq_len * seq_len  # the held-out windows' targets
    affordable = int(VALIDATION_SHARE * config.steps * config.batch_size * seq_len // max(pass_tokens, 1))
    return max(every, -(-config.steps // max(affordable, 1)))
