"""The family protocol, and the families by name (registry.FAMILIES), imported when first asked for.

A family is a module (a folder under `model/`) that gives:
- `Config`: a dataclass of the family's shape. Its first field is `vocab_size` (set from the tokenizer, not a
  user setting); every other field made with `core.fields.setting(...)` is a setting, so its flag, YAML key, help
  and CLI reference row follow from it, and one of them is `seq_len`, the context length in tokens. Families
  that share a setting (`seq_len`, `d_model`) declare it alike;
- `config_from(settings, vocab_size) -> Config` (optional): the config from a run's settings where it is more
  than one field per setting (GPT's --heads fixes d_model); without it each field takes its setting's value;
- `param_specs(config, prefix="") -> list[ParamSpec]`: every parameter in checkpoint order (name, shape,
  init, whether it decays and whether it trains), each name after `prefix`, so that several sub-models can
  share one flat parameter store;
- `build(config, backend, tokenizer, seed) -> Model`;
- `memory_parts(config, batch, backend) -> {"activations": bytes, "workspace": bytes}`: what one training
  step over `batch` sequences holds beyond the parameter state (model/memory.py adds that), with the backend
  reporting its own attention footprint (`Backend.attention_memory`);
- `describe(config) -> str`: one line for the CLI, the results line and plot titles;
- `parse_specs(text, settings) -> [(spec, settings it fixes)]` and `SPEC_KEYS` (optional): short shape
  strings for `--compare`, and the settings they fix;
- `SELECTED_BY` (optional): a setting of the family whose use chooses it where --family is not given
  (the ensemble's --cooperative);
- `check_training(config, train_config)` (optional): a ConfigError for a config that the training settings
  make unusable (the ensemble's --prior-off-at past --steps).
- `upgrade_saved(model) -> model` (optional): a checkpoint's saved config (config.json's `model`) of an older
  layout as this microgpt reads it, so that it loads as it was trained (the ensemble's one-head experts).

A built `Model` gives `config`, `be` (its backend), `params` (`model.params.Parameters`), `n_params`,
`loss(windows)` and `loss_and_backward(windows)` over windows (B, T+1) (the latter adding every gradient
into params.grad, and returning (the mean loss, a small dict of per-step metrics, empty for most families)
that the trainer writes into the metrics log), `logits(ids)` (backend (B*T, vocab) for host ids (B, T): row t
scores the token after ids[:, : t + 1]), `with_gradients(views)` (an object whose `loss` and `loss_and_backward`
run over the same weights and add their gradients into views.gradient: the trainer runs each thread's slice of
a batch on one, model/thread_split.py) and `decoder()` (an object with `model`, `consumed`, `prefill(ids)`
and `step(id)`, each giving the next token's logits (1, vocab); `model.decode.Rerun` for a family without a
cache). Optionally `learn_from(train_tokens)`: what a new model counts from its training tokens before it
trains (the ensemble's n-gram tables).
"""

from __future__ import annotations

import dataclasses
import importlib
from types import ModuleType

from microgpt.core.checks import Path
from microgpt.core.errors import ConfigError
from microgpt.core.fields import settings_fields
from microgpt.core.registry import FAMILIES


def family(name: str) -> ModuleType:
    """The family module called `name`, imported on first use."""
    if name not in FAMILIES:
        raise ConfigError(f"unknown model family {name!r}; the families are: {', '.join(FAMILIES)}")
    return importlib.import_module(FAMILIES[name])


def saved_model(name: str, model):
    """config.json's `model` of a family `name` as this microgpt reads it (the family's `upgrade_saved`, where it
    has one); as it is for an unknown family or a damaged value, which the load then names."""
    if name not in FAMILIES or not isinstance(model, dict):
        return model
    upgrade = getattr(family(name), "upgrade_saved", None)
    return model if upgrade is None else upgrade(model)


def path_fields(name: str) -> list[str]:
    """The fields of family `name`'s config that a flag gives as a path, which the config reads (the graph
    family's document): a saved config holds what was read, never the path."""
    if name not in FAMILIES:
        return []
    return [f.field for f in settings_fields(family(name).Config) if isinstance(f.check, Path)]


def config_dict(config) -> dict:
    """A family config as JSON-ready values (tuples as lists), for config.json and results.jsonl."""
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(config).items()}


def n_params(family_module: ModuleType, config) -> int:
    """The number of parameters a config's model has, from its specs alone (nothing is allocated)."""
    return sum(spec.size for spec in family_module.param_specs(config))
