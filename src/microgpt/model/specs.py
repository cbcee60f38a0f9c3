"""Model spec strings, short names for a model shape: d64n2, d4x16n2, d1+2+4+8+16+32n2.

Grammar (SPEC_GRAMMAR): the heads, then the layers, then an optional FFN width.
- `d<width>`: one head of that width (d64: one head, d_model 64). An ensemble expert (--cooperative) reads
  it as the original µGPT does: max(1, width // 16) heads of 16 (d64: four heads of 16; d8: one of 8; a width
  that 16 does not divide is split as evenly as it goes), so d1x64 is an expert with one head of 64;
- `d<count>x<width>`: equal heads (d4x16: four heads of 16, d_model 64);
- `d<w1>+<w2>+...`: heads of those widths (d1+2+4+8+16+32: d_model 63);
- `n<layers>`: the number of transformer blocks (required);
- `ff<d_ff>`: the feed-forward width; without it, d_ff is 4 x d_model (256 for d_model 64),
  so wider models get wider FFNs.
d_model is always the total width of the heads. The gpt family's `--compare` specs and the ensemble's experts.
An expert's spec is kept with its heads spelled out (`expert_text`: d64n3 is kept as d4x16n3), so a
checkpoint's config says its heads whoever reads it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from microgpt.core.errors import ConfigError, Named
from microgpt.model.attention import MAX_HEADS

SPEC_GRAMMAR = ("d<width>, d<count>x<width> or d<w1>+<w2>+..., then n<layers>, then optionally ff<d_ff>; "
                "e.g. d64n2, d4x16n2, d1+2+4+8+16+32n2, d4x16n2ff128")
EXPERT_GRAMMAR = ("an expert's d<width> without a head count reads as max(1, width/16) heads of 16, the "
                  "original's reading (d64: d4x16); d1x64 is one head of 64")
FF_PER_D_MODEL = 4  # d_ff = 4 x d_model when a spec does not give ff<d_ff>
EXPERT_HEAD_WIDTH = 16  # the original µGPT's head width for a spec that gives no head count
MAX_SPEC_NUMBER = 2**31  # a width, count, layers or ff past this is no model here (and its heads are not made)
MAX_SPECS = 1000  # specs in one list: models compared, or an ensemble's experts (each a group of its graph)
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


def expert_heads(width: int) -> tuple[int, ...]:
    """The original's heads for a width given without a head count: max(1, width // 16) heads of 16, or, where 16
    does not divide it, that many heads as even as they go (d40: 20 + 20; d50: 17 + 17 + 16)."""
    count = max(1, width // EXPERT_HEAD_WIDTH)
    return tuple(width // count + (1 if i < width % count else 0) for i in range(count))


def parse_spec(text: str, expert: bool = False) -> ModelSpec:
    """A spec; `expert` reads a width without a head count as an ensemble expert's heads (`expert_heads`)."""
    match = _SPEC.fullmatch(text.strip())
    if match is None:
        grammar = f"{SPEC_GRAMMAR}; {EXPERT_GRAMMAR}" if expert else SPEC_GRAMMAR
        raise ConfigError(f"model spec {text[:80]!r} is not valid; a spec is {grammar}")
    numbers = re.findall(r"\d+", text)
    if any(len(number) > 10 or int(number) > MAX_SPEC_NUMBER for number in numbers):
        raise ConfigError(f"model spec {text[:80]!r} has a number past {MAX_SPEC_NUMBER:,}; no model here is that "
                          "big")
    heads = (int(match.group("count")) if match.group("count") else
             len(match.group("widths").split("+")) if not expert or "+" in match.group("widths")
             else max(1, int(match.group("widths")) // EXPERT_HEAD_WIDTH))
    if heads > MAX_HEADS:
        raise ConfigError(f"model spec {text[:80]!r} has {heads:,} heads; a spec has at most {MAX_HEADS:,} (give "
                          "fewer, wider heads: d<count>x<width>)")
    if match.group("count"):
        head_dims = (int(match.group("width")),) * int(match.group("count"))
    else:
        head_dims = tuple(int(w) for w in match.group("widths").split("+"))
        if expert and len(head_dims) == 1 and head_dims[0] > 0:
            head_dims = expert_heads(head_dims[0])
    n_layers = int(match.group("layers"))
    d_ff = int(match.group("ff")) if match.group("ff") else None
    if not head_dims or min(head_dims) < 1 or n_layers < 1 or d_ff == 0:  # d0x16 has no heads
        raise ConfigError(f"model spec {text!r}: head counts, widths, layers and ff must be at least 1")
    return ModelSpec(text.strip(), head_dims, n_layers, d_ff)


def parse_spec_list(text: str, key: str = "compare", expert: bool = False, entry: str = "") -> list[ModelSpec]:
    """Comma-separated specs, each valid, given by the setting `key` (`entry`: which part of it, "entry " for an
    ensemble's in a --compare list); for compare none repeated (each run writes to a directory named after it),
    where an ensemble's experts (cooperative) may share a shape; `expert` as parse_spec's."""
    named = Named(key, text[:80])
    items = [item.strip() for item in text.split(",")]
    if not all(items):
        raise ConfigError(named, f" has an empty {entry or 'entry'}; list specs separated by commas, e.g. "
                          "d64n2,d4x16n2")
    if len(items) > MAX_SPECS:
        raise ConfigError(Named(key), f" {entry}lists {len(items):,} specs; it takes at most {MAX_SPECS:,}")
    try:
        specs = [parse_spec(item, expert) for item in items]
    except ConfigError as exc:  # said on the setting that gave it (an editor shows it under that field)
        raise ConfigError(Named(key), f" {entry}".rstrip() + ": ", *exc.parts) from None
    seen: set[str] = set()
    for spec in specs:
        if key == "compare" and not entry and spec.text in seen:
            raise ConfigError(Named(key), f" lists {spec.text} twice; list each spec once")
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


def expert_text(spec: ModelSpec) -> str:
    """An expert's spec with its heads spelled out, so that it reads the same under either reading of a width
    without a head count: d8n2 (one head of 8 under both), d4x16n2 (what d64n2 reads as), d1x64n2 (one head of
    64), d16+48n2; with the spec's own ff<d_ff> where it gives one."""
    widths = spec.head_dims
    if len(widths) == 1 and expert_heads(widths[0]) == widths:
        heads = f"{widths[0]}"
    elif len(set(widths)) == 1:
        heads = f"{len(widths)}x{widths[0]}"
    else:
        heads = "+".join(str(w) for w in widths)
    return f"d{heads}n{spec.n_layers}" + ("" if spec.d_ff is None else f"ff{spec.d_ff}")


def one_head_text(text: str) -> str:
    """An expert spec as checkpoints saved before the original's reading wrote it (a width without a head count:
    one head of that width), in the form experts read now (`expert_text`)."""
    return expert_text(parse_spec(text))
