"""The lookahead family: a GPT trunk with K extra heads that look further ahead (mode mtp, and mode hydra, whose
heads also read the tokens before their target; both can draft for speculative sampling) or fill a hidden gap
(mode gap), none of which sees the token it predicts (model/family.py says what a family gives; config.py the
settings, heads.py the heads, model.py the model, distill.py the heads' distillation toward the main head,
speculative.py and hydra_draft.py the drafting decoders; docs/lookahead.md why the original's heads leak and
these do not).
"""

from __future__ import annotations

import numpy as np

from microgpt.model.gpt import describe as describe_trunk
from microgpt.model.gpt import parse_specs
from microgpt.model.lookahead.config import LookaheadConfig, config_from, upgrade_saved
from microgpt.model.lookahead.model import Lookahead, param_specs
from microgpt.model.transformer_memory import stack_parts

Config = LookaheadConfig
SELECTED_BY = "lookahead"  # --lookahead K chooses this family without --family
SPEC_KEYS = ("d_model", "heads", "n_layers")  # a --compare spec fixes the trunk, as GPT's does


def build(config: LookaheadConfig, backend, tokenizer, seed: int) -> Lookahead:
    """A new model with weights drawn from `seed` (the tokenizer is only its vocabulary size here)."""
    return Lookahead(config, backend, seed=seed)


def memory_parts(config: LookaheadConfig, batch: int, backend) -> dict[str, int]:
    """The trunk's stack (model/transformer_memory.py), plus one extra head's at a time (they run in turn: a
    stack of blocks, or a hydra head's layers), the trunk states' gradient that the heads add into, and the
    embeddings they read with their gradients: in mode gap one set, in mode hydra K (one per shift)."""
    trunk = stack_parts(config.head_dims, config.n_layers, config.d_ff, config.vocab_size, config.seq_len, batch,
                        backend)
    rows = batch * config.seq_len
    if config.lookahead_mode == "hydra":
        head = hydra_head_parts(config, rows, backend)
    else:
        head = stack_parts(config.head_dims, config.head_layers, config.d_ff, config.vocab_size, config.seq_len,
                           batch, backend)
    memories = {"gap": 1, "hydra": config.lookahead}.get(config.lookahead_mode, 0)
    extra_rows = (1 + 2 * memories) * rows * config.d_model  # dx; memory and dmemory
    element = np.dtype(backend.dtype).itemsize
    if config.lookahead_mode == "hydra":  # its head is gone before the trunk's backward, whose temporaries dwarf it
        return {"activations": trunk["activations"] + extra_rows * element,
                "workspace": max(trunk["workspace"], head["activations"] + head["workspace"])}
    return {"activations": trunk["activations"] + head["activations"] + extra_rows * element,
            "workspace": max(trunk["workspace"], head["workspace"])}


def hydra_head_parts(config: LookaheadConfig, rows: int, backend) -> dict[str, int]:
    """What one hydra head holds, as stack_parts counts a stack's (model/transformer_memory.py), in elements of N
    rows: per layer its LayerNorm's output and normalised input and 1/std column (2 x N x d + N), the product
    before the ReLU, its output and mask (3 x N x d_ff) and the residual stream after it (N x d); then the final
    norm's (2 x N x d + N) and the logits and their gradient (2 x N x V); at bf16 the bits a backend keeps beside
    the norms' and the ReLU's outputs (`Backend.rounded_memory`). Backward's largest temporaries: the loss's
    (2 x N x V), or a layer's gradients of its product and of the K embeddings (2 x N x d_ff + K x N x d)."""
    d, d_ff, vocab = config.d_model, config.d_ff, config.vocab_size
    per_layer = 3 * rows * d + rows + 3 * rows * d_ff + backend.rounded_memory(rows * d + rows * d_ff)
    activations = config.head_layers * per_layer + 2 * rows * d + rows + 2 * rows * vocab + \
        backend.rounded_memory(rows * d)
    workspace = max(2 * rows * vocab, 2 * rows * d_ff + config.lookahead * rows * d)
    element = np.dtype(backend.dtype).itemsize
    return {"activations": activations * element, "workspace": workspace * element}


def describe(config: LookaheadConfig) -> str:
    """'lookahead 2 mtp heads (1 layer each, weight 1) on gpt d4x24n4: d_model 96, ...'."""
    layers = f"{config.head_layers} layer{'s' if config.head_layers != 1 else ''} each"
    distill = f", distill {config.lookahead_distill:g}" if config.lookahead_distill else ""
    return (f"lookahead {config.lookahead} {config.lookahead_mode} head{'s' if config.lookahead != 1 else ''} "
            f"({layers}, weight {config.lookahead_weight:g}{distill}) on {describe_trunk(config)}")


__all__ = ["SELECTED_BY", "SPEC_KEYS", "Config", "build", "config_from", "describe", "memory_parts", "param_specs",
           "parse_specs", "upgrade_saved"]
