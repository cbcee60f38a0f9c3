"""Every setting there is: the run's own (training.py) and every registered model family's shape."""

from __future__ import annotations

from types import ModuleType

from microgpt.core.fields import SettingField, settings_fields
from microgpt.core.registry import FAMILIES
from microgpt.model.family import family
from microgpt.settings.training import ModelChoice, RunConfig, TrainConfig


def known_settings() -> dict[str, SettingField]:
    """Every setting by key, in the order help and the CLI reference list them: the model's kind, each family's
    shape (a key that several families declare is one setting), how a run trains, where it runs."""
    found: dict[str, SettingField] = {}
    owners = [ModelChoice, *(family(name).Config for name in FAMILIES), TrainConfig, RunConfig]
    for f in settings_fields(*owners):
        if f.key in found and found[f.key].default != f.default:
            raise AssertionError(f"{f.owner.__name__} declares {f.key} with another default than "
                                 f"{found[f.key].owner.__name__}; families that share a setting declare it alike")
        found.setdefault(f.key, f)
    return found


def family_keys(kind: ModuleType) -> list[str]:
    """The setting keys of a family's config (its shape)."""
    return [f.key for f in settings_fields(kind.Config)]
