"""Configuration dataclasses and the parsers for head layouts.

`ModelConfig` is the model's shape (what a checkpoint's config.json records);
`TrainConfig` is how a run trains. `parse_heads` reads `--heads` (a count,
explicit widths, or one of the reference's named sets).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

# The reference's named head sets; a named set fixes d_model to its sum.
NAMED_HEADS: dict[str, tuple[int, ...]] = {
    "exponential": (1, 2, 4, 8, 16, 32),
    "prime": (2, 3, 5, 7, 11, 13, 23),
    "pyramid": (16, 8, 8, 4, 4, 4, 4, 2, 2, 2, 2, 2, 2, 2, 2),
    "ones": (1,) * 64,
}


class ConfigError(ValueError):
    """An invalid configuration value; the message names it and says how to fix it."""


@dataclass
class ModelConfig:
    vocab_size: int
    d_model: int = 64
    n_layers: int = 2
    head_dims: tuple[int, ...] = (16, 16, 16, 16)
    d_ff: int = 256
    seq_len: int = 128

    def __post_init__(self) -> None:
        self.head_dims = tuple(int(w) for w in self.head_dims)
        for name in ("vocab_size", "d_model", "n_layers", "d_ff", "seq_len"):
            if int(getattr(self, name)) < 1:
                raise ConfigError(f"{name} must be at least 1, got {getattr(self, name)}")
        if not self.head_dims or min(self.head_dims) < 1:
            raise ConfigError(f"every head needs a width of at least 1, got {list(self.head_dims)}")
        if sum(self.head_dims) != self.d_model:
            raise ConfigError(
                f"head widths {list(self.head_dims)} sum to {sum(self.head_dims)} but d_model is {self.d_model}; "
                "make them add up (e.g. --heads 4 splits d_model evenly)"
            )

    @property
    def n_heads(self) -> int:
        return len(self.head_dims)

    def to_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(self).items()}


@dataclass
class TrainConfig:
    steps: int = 10000
    seed: int = 42
    lr: float = 3e-4
    batch_size: int = 1
    stride: int | None = None  # tokens between sequential windows; None = seq_len
    random_batches: bool = False
    val_tokens: int = 0
    val_interval: float = 30.0  # seconds between validation passes
    eval_every: int = 0  # steps between validation passes; 0 = use val_interval
    save_every: int = 0  # steps between checkpoints; 0 = only at the end (and on Ctrl-C)

    def __post_init__(self) -> None:
        if self.steps < 0:
            raise ConfigError(f"--steps must be 0 or more, got {self.steps}")
        if not self.lr > 0:
            raise ConfigError(f"--lr must be positive, got {self.lr}")
        if self.batch_size < 1:
            raise ConfigError(f"--batch-size must be at least 1, got {self.batch_size}")
        if self.val_tokens < 0:
            raise ConfigError(f"--val-tokens must be 0 or more, got {self.val_tokens}")
        if self.save_every < 0:
            raise ConfigError(f"--save-every must be 0 or more, got {self.save_every}")
        if self.eval_every < 0:
            raise ConfigError(f"--eval-every must be 0 or more, got {self.eval_every}")
        if not self.val_interval > 0:
            raise ConfigError(f"--val-interval must be a positive number of seconds, got {self.val_interval}")
        if self.stride is not None and self.stride < 1:
            raise ConfigError(f"--stride must be at least 1, got {self.stride}")


def parse_heads(text: str, d_model: int) -> tuple[tuple[int, ...], int]:
    """(head widths, d_model) from a --heads value.

    "4" splits d_model into 4 equal heads; "8,8,16,32" gives the widths; a named
    set ("uniform" = 4 equal heads, "exponential", "prime", "pyramid", "ones")
    fixes d_model to the sum of its widths.
    """
    text = text.strip().lower()
    if text == "uniform":
        text = "4"
    if text in NAMED_HEADS:
        widths = NAMED_HEADS[text]
        return widths, sum(widths)
    try:
        numbers = [int(part) for part in text.split(",")]
    except ValueError:
        raise ConfigError(
            f"--heads {text!r} is not a count, a list of widths or a named set; "
            f"try 4, 8,8,16,32 or one of: uniform, {', '.join(NAMED_HEADS)}"
        ) from None
    if any(n < 1 for n in numbers):
        raise ConfigError(f"--heads {text!r}: counts and widths must be positive")
    if len(numbers) == 1:
        count = numbers[0]
        if d_model % count:
            raise ConfigError(f"--heads {count} does not divide d_model {d_model}; pick a divisor or list the widths")
        return (d_model // count,) * count, d_model
    return tuple(numbers), sum(numbers)
