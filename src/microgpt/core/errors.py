"""The errors a user can cause, at the ground so every layer can raise them without importing another.

Each carries a message that names the problem and the fix; the CLI prints it as
one line and exits 2 (cli/__init__.py).
"""

from __future__ import annotations


class ConfigError(ValueError):
    """An invalid configuration value; the message names it and says how to fix it."""


class DataError(ValueError):
    """Unusable training or evaluation text; the message names the problem and the fix."""


class DistributedError(ConfigError):
    """Several processes were started but cannot train together; the message says why and what to do."""


class TrainingStopped(RuntimeError):
    """Training stopped early (a non-finite loss); the message says why and what was kept."""


class WriterStopped(TrainingStopped):
    """A stop only the writing process sees (its save refused unsound weights): with several processes it must
    stop the others too, which are not stopping by themselves."""


class UnsoundOutputs(ValueError):
    """A model whose outputs are NaN or infinite; the message says so and what to do."""


class NonFiniteLoss(ArithmeticError):
    """A step's loss came out NaN or infinite, so no update follows (the trainer turns it into TrainingStopped)."""

    def __init__(self, loss: float, step: int):
        super().__init__(f"the loss became {loss} at step {step}; the weights are kept as they were before it")
        self.loss, self.step = loss, step


class HungRanks(RuntimeError):
    """Some ranks did not reach a collective within --collective-timeout. Every live rank raises it; `reports` is
    True in the one that prints it (the lowest live rank), so the job ends with one line."""

    def __init__(self, message: str, reports: bool):
        super().__init__(message)
        self.reports = reports

    def adding(self, what: str) -> HungRanks:
        """The same error with more said (what the checkpoint on disk holds)."""
        return HungRanks(f"{self}; {what}", self.reports)
