"""GPT's settings: the shape of the model, each setting declared once (core/fields.py), and the head sets.

`GPTConfig` is what a checkpoint's config.json records under "model" for the gpt family; `config_from`
builds it from a run's settings, where --heads may fix d_model; `parse_heads` reads a --heads value (a
count, explicit widths, or a named set).
"""

from __future__ import annotations

from dataclasses import dataclass

from microgpt.core.checks import HEADS, whole
from microgpt.core.errors import ConfigError, Named
from microgpt.core.fields import check_model_fields, setting
from microgpt.model.attention import MAX_HEADS

# Named head sets; a named set fixes d_model to its sum.
NAMED_HEADS: dict[str, tuple[int, ...]] = {
    "exponential": (1, 2, 4, 8, 16, 32),
    "prime": (2, 3, 5, 7, 11, 13, 23),
    "pyramid": (16, 8, 8, 4, 4, 4, 4, 2, 2, 2, 2, 2, 2, 2, 2),
    "ones": (1,) * 64,
}
DEFAULT_HEAD_COUNT = 4  # without --heads, d_model is split into this many equal heads


@dataclass
class GPTConfig:
    vocab_size: int
    d_model: int = setting(96, "model width", whole(1))
    n_layers: int = setting(4, "transformer blocks", whole(1))
    head_dims: tuple[int, ...] | None = setting(
        None, "a head count (4), explicit widths (8,8,16,32), or a named set: uniform (4 equal), "
        "exponential (1,2,4,8,16,32), prime (2,3,5,7,11,13,23), pyramid (16,8,8,4,4,4,4,2x8), ones (64x1); "
        "a named set or width list fixes d_model to its sum", HEADS, key="heads",
        shown_default=str(DEFAULT_HEAD_COUNT), metavar="H")
    d_ff: int = setting(384, "feed-forward width", whole(1))
    seq_len: int = setting(64, "context length in tokens (characters with the char tokenizer)", whole(1),
                           metavar="T")

    def __post_init__(self) -> None:
        if self.head_dims is None:
            self.head_dims = parse_heads(str(DEFAULT_HEAD_COUNT), self.d_model)[0]
        check_model_fields(self)
        if len(self.head_dims) > MAX_HEADS:
            raise ConfigError(f"{len(self.head_dims):,} heads is more than {MAX_HEADS:,}; give fewer, wider heads",
                              key="heads")
        self.head_dims = tuple(self.head_dims)
        if not self.head_dims or min(self.head_dims) < 1:
            raise ConfigError(f"every head needs a width of at least 1, got {list(self.head_dims)}", key="heads")
        if sum(self.head_dims) != self.d_model:
            raise ConfigError(f"head widths {list(self.head_dims)} sum to {sum(self.head_dims)}, not ",
                              Named("d_model", self.d_model), "; make them add up (", Named("heads", 4),
                              " splits the width evenly)", key="heads")

    @property
    def n_heads(self) -> int:
        return len(self.head_dims)


def config_from(settings, vocab_size: int) -> GPTConfig:
    """The shape from a run's settings (settings/sources.py): --heads as a count splits d_model, as widths or a
    named set fixes it (and a --d-model given beside it must agree)."""
    d_model, heads = settings.value("d_model"), settings.value("heads")
    shape = {"vocab_size": vocab_size, "n_layers": settings.value("n_layers"), "d_ff": settings.value("d_ff"),
             "seq_len": settings.value("seq_len")}
    if heads is None:
        return GPTConfig(d_model=d_model, **shape)
    if isinstance(heads, (tuple, list)):  # widths: a YAML list, a spec's or a checkpoint's
        head_dims, heads_d_model = tuple(heads), sum(heads)
    else:
        head_dims, heads_d_model = parse_heads(str(heads), d_model)
    if settings.given("d_model") and heads_d_model != d_model:
        raise ConfigError(settings.mention("heads"), f" makes the width {heads_d_model}, not ",
                          settings.mention("d_model"), "; drop one of them")
    return GPTConfig(d_model=heads_d_model, head_dims=head_dims, **shape)


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
        raise ConfigError(Named("heads", text), " is not a count, a list of widths or a named set; try 4, "
                          f"8,8,16,32 or one of: uniform, {', '.join(NAMED_HEADS)}") from None
    if any(n < 1 for n in numbers):
        raise ConfigError(Named("heads", text), ": counts and widths must be positive")
    if len(numbers) == 1:
        count = numbers[0]
        if count > MAX_HEADS:
            raise ConfigError(f"{count:,} heads is more than {MAX_HEADS:,}; give fewer, wider heads", key="heads")
        if d_model % count:
            raise ConfigError(Named("heads", count), " does not divide ", Named("d_model", d_model),
                              "; pick a divisor or list the widths")
        return (d_model // count,) * count, d_model
    return tuple(numbers), sum(numbers)
