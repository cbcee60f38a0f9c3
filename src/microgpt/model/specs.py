"""Model spec strings, short names for a model shape: d64n2, d4x16n2, d1+2+4+8+16+32n2.

Grammar (SPEC_GRAMMAR): the heads, then the layers, then an optional FFN width.
- `d<width>`: one head of that width (d64: one head, d_model 64);
- `d<count>x<width>`: equal heads (d4x16: four heads of 16, d_model 64);
- `d<w1>+<w2>+...`: heads of those widths (d1+2+4+8+16+32: d_model 63);
- `n<layers>`: the number of transformer blocks (required);
- `ff<d_ff>`: the feed-forward width; without it, d_ff is 4 x d_model (256 for d_model 64),
  so wider models get wider FFNs.
d_model is always the total width of the heads. The gpt family's `--compare` specs and the ensemble's experts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from microgpt.core.errors import ConfigError

SPEC_GRAMMAR = ("d<width>, d<count>x<width> or d<w1>+<w2>+..., then n<layers>, then optionally ff<d_ff>; "
                "e.g. d64n2, d4x16n2, d1+2+4+8+16+32n2, d4x16n2ff128")
FF_PER_D_MODEL = 4  # d_ff = 4 x d_model when a spec does not give ff<d_ff>
_SPEC = re.compile(r"d(?:(?P<count>\d+)x(?P<width>\d+)|(?P<widths>\d+(?:\+\d+)*))n(?P<layers>\d+)(?:ff(?P<ff>\d+))?")


@dataclass(frozen=True)
class ModelSpec:
    text: str  # as written
    head_dims: tuple[int, ...]
    n_layers: int
    d_ff: int | None  # None: not in the spec

    @property
    def d_model(self) -> int:
        return sum(self.head_dims)

    def settings(self, d_ff: int | None = None) -> dict:
        """The settings the spec fixes: its heads (and so d_model) and layers, and d_ff: the spec's, else the
        given one, else 4 x d_model."""
        return {"heads": self.head_dims, "n_layers": self.n_layers,
                "d_ff": self.d_ff or d_ff or FF_PER_D_MODEL * self.d_model}


def parse_spec(text: str) -> ModelSpec:
    match = _SPEC.fullmatch(text.strip())
    if match is None:
        raise ConfigError(f"model spec {text!r} is not valid; a spec is {SPEC_GRAMMAR}")
    if match.group("count"):
        head_dims = (int(match.group("width")),) * int(match.group("count"))
    else:
        head_dims = tuple(int(w) for w in match.group("widths").split("+"))
    n_layers = int(match.group("layers"))
    d_ff = int(match.group("ff")) if match.group("ff") else None
    if not head_dims or min(head_dims) < 1 or n_layers < 1 or d_ff == 0:  # d0x16 has no heads
        raise ConfigError(f"model spec {text!r}: head counts, widths, layers and ff must be at least 1")
    return ModelSpec(text.strip(), head_dims, n_layers, d_ff)


def parse_spec_list(text: str, flag: str = "--compare") -> list[ModelSpec]:
    """Comma-separated specs, each valid; for --compare none repeated (each run writes to a directory named
    after it), where an ensemble's experts (--cooperative) may share a shape."""
    items = [item.strip() for item in text.split(",")]
    if not all(items):
        raise ConfigError(f"{flag} {text!r} has an empty entry; list specs separated by commas, e.g. d64n2,d4x16n2")
    specs = [parse_spec(item) for item in items]
    seen: set[str] = set()
    for spec in specs:
        if flag == "--compare" and spec.text in seen:
            raise ConfigError(f"--compare lists {spec.text} twice; list each spec once")
        seen.add(spec.text)
    return specs


def format_spec(head_dims: tuple[int, ...], n_layers: int, d_ff: int) -> str:
    """The shortest spec for a shape: d4x16n2, d64n2, d1+2+4n2, with ff<d_ff> unless it is 4 x d_model."""
    if len(set(head_dims)) == 1:
        heads = f"{head_dims[0]}" if len(head_dims) == 1 else f"{len(head_dims)}x{head_dims[0]}"
    else:
        heads = "+".join(str(w) for w in head_dims)
    ff = "" if d_ff == FF_PER_D_MODEL * sum(head_dims) else f"ff{d_ff}"
    return f"d{heads}n{n_layers}{ff}"
