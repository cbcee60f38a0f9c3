"""The gpt family: a decoder-only transformer with RoPE and heads of equal or unequal widths.

The family's face (model/family.py says what a family gives): its settings (`Config`, config.py), its
parameters (`param_specs`) and model (`GPT`), both model/transformer.py's (the GPT in one file), `build`,
`memory_parts` (model/transformer_memory.py), `describe` and the `--compare` specs (model/specs.py, shared with
the ensemble's experts).
"""

from __future__ import annotations

from microgpt.model.gpt.config import GPTConfig, config_from
from microgpt.model.specs import SPEC_GRAMMAR, format_spec, parse_spec_list
from microgpt.model.transformer import GPT, param_specs
from microgpt.model.transformer_memory import stack_parts

Config = GPTConfig
SPEC_KEYS = ("d_model", "heads", "n_layers")  # the settings a --compare spec fixes (d_ff only where it says)


def build(config: GPTConfig, backend, tokenizer, seed: int) -> GPT:
    """A new model with weights drawn from `seed` (the tokenizer is only its vocabulary size here)."""
    return GPT(config, backend, seed=seed)


def memory_parts(config: GPTConfig, batch: int, backend) -> dict[str, int]:
    """What a training step holds beyond the parameter state (model/transformer_memory.py)."""
    return stack_parts(config.head_dims, config.n_layers, config.d_ff, config.vocab_size, config.seq_len, batch,
                       backend)


def describe(config: GPTConfig) -> str:
    """'gpt d4x24n4: d_model 96, 4 layers, heads [24, 24, 24, 24], d_ff 384, seq_len 64'."""
    layers = f"{config.n_layers} layer{'s' if config.n_layers != 1 else ''}"
    return (f"gpt {format_spec(config.head_dims, config.n_layers, config.d_ff)}: d_model {config.d_model}, "
            f"{layers}, heads {list(config.head_dims)}, d_ff {config.d_ff}, seq_len {config.seq_len}")


def parse_specs(text: str, settings) -> list[tuple[str, dict]]:
    """(each spec as written, the settings it fixes) for a --compare list: d_ff is the spec's, else --d-ff
    (or the preset's) where given, else 4 x d_model."""
    d_ff = settings.value("d_ff") if settings.given("d_ff") or "d_ff" in settings.preset else None
    return [(spec.text, spec.settings(d_ff)) for spec in parse_spec_list(text)]


__all__ = ["SPEC_GRAMMAR", "SPEC_KEYS", "Config", "build", "config_from", "describe", "memory_parts",
           "param_specs", "parse_specs"]
