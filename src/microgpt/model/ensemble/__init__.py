"""The ensemble family: small transformer experts that cooperate through a narrow shared stream, a router
that mixes their next-token logits, and an optional algorithmic prior (model/family.py says what a family
gives; model.py the model, priors.py the prior's write, expert.py an expert; the router and the priors'
features are shared parts, model/router.py and model/priors.py)."""

from __future__ import annotations

import numpy as np

from microgpt.core.errors import ConfigError, Named, Placeholder
from microgpt.model.ensemble.config import EnsembleConfig, upgrade_saved
from microgpt.model.ensemble.model import Ensemble, param_specs
from microgpt.model.specs import parse_spec_list
from microgpt.model.transformer_memory import stack_parts

Config = EnsembleConfig
SELECTED_BY = "cooperative"  # --cooperative SPECS chooses this family without --family
SPEC_KEYS = ("cooperative",)  # what a --compare entry fixes


def parse_specs(text: str, settings) -> list[tuple[str, dict]]:
    """--compare with --family ensemble: ensembles separated by ';', each its experts' specs (d64n3,d64n3)."""
    entries = [entry.strip() for entry in text.split(";")]
    if not all(entries):
        raise ConfigError(Named("compare", text), " has an empty entry; separate ensembles by ';', e.g. "
                          "d64n3,d64n3;d32n3,d32n3,d32n3,d32n3")
    if len(set(entries)) != len(entries):
        raise ConfigError(Named("compare", text), " lists an ensemble twice; list each once")
    for entry in entries:
        parse_spec_list(entry, "compare", expert=True, entry="entry ")  # each entry's specs checked before training
    return [(entry, {"cooperative": entry}) for entry in entries]


def build(config: EnsembleConfig, backend, tokenizer, seed: int) -> Ensemble:
    return Ensemble(config, backend, tokenizer, seed)


def memory_parts(config: EnsembleConfig, batch: int, backend) -> dict[str, int]:
    """Each expert's blocks and logits (model/transformer_memory.py, with the stream in place of nothing),
    plus the streams kept between experts, the prior's features and the mixed logits and their gradient."""
    parts = {"activations": 0, "workspace": 0}
    for spec in config.experts:
        expert = stack_parts(spec.head_dims, spec.n_layers, config.d_ff(spec), config.vocab_size, config.seq_len,
                             batch, backend)
        parts["activations"] += expert["activations"]
        parts["workspace"] = max(parts["workspace"], expert["workspace"])
    rows = batch * config.seq_len
    element = np.dtype(backend.dtype).itemsize
    streams = (len(config.experts) + 2) * rows * config.stream_dim  # one per expert, the prior's, its gradient
    parts["activations"] += (streams + rows * config.vocab_size * 3) * element  # prior features, mixed, dmixed
    return parts


def check_training(config: EnsembleConfig, train_config) -> None:
    if config.prior_off_at is not None and config.prior_off_at > train_config.steps:
        raise ConfigError(Named("prior_off_at", config.prior_off_at), " is past the end of the run (",
                          Named("steps", train_config.steps), "), so the prior would never be switched off; give a "
                          f"step up to {train_config.steps}, or drop it")
    if config.prior == "none" and config.prior_off_at is not None:
        raise ConfigError(Named("prior_off_at"), " switches off the prior's write, and there is no prior (",
                          Named("prior", "none"), "); add ", Named("prior", Placeholder("KIND")), " or drop it")


def describe(config: EnsembleConfig) -> str:
    """'ensemble of 4 experts d64n3,d64n3,d64n3,d64n3, stream 64 (32 active), prior bigram, router global, ...'."""
    active = "" if config.active == config.stream_dim else f" ({config.active} active)"
    off = "" if config.prior_off_at is None else f" until step {config.prior_off_at}"
    if config.prior not in ("none", "counter") and not config.prior_bias:
        off += " (its projection without a bias, as saved before it had one)"
    return (f"ensemble of {len(config.experts)} experts {config.cooperative}: stream {config.stream_dim}{active}, "
            f"prior {config.prior}{off}, router {config.router} (epsilon {config.router_epsilon:g}), "
            f"expert grad {config.expert_grad}, seq_len {config.seq_len}")


__all__ = ["SELECTED_BY", "SPEC_KEYS", "Config", "build", "check_training", "describe", "memory_parts", "param_specs",
           "parse_specs", "upgrade_saved"]
