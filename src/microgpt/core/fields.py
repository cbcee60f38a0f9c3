"""How a user setting is declared: a dataclass field with its default, type, help text and check.

Every field made with `setting(...)` is a user setting: the command's flag
(`--d-model` for d_model), the key of a named run in YAML (`d_model`), its help
line, the CLI reference's flag table (docs/cli.md) and the studio's forms are all derived from the
field (`settings_fields`), and `check_fields` holds every value to its check.
Each layer declares its own settings with it: a model family its shape
(model/gpt/config.py), a run how it trains (settings/training.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from microgpt.core.checks import Check, NumberOrOff, shown
from microgpt.core.errors import ConfigError, Named

__all__ = ["SettingField", "check_fields", "check_model_fields", "setting", "settings_fields"]


def setting(default, help: str, check: Check, *, key: str | None = None, shown_default: str | None = None,
            metavar: str | None = None):
    """A dataclass field that is a user setting.

    `key` names the flag and YAML key when it differs from the field's name; `shown_default` describes a
    default that is computed rather than fixed (None standing for "seq-len", say).
    """
    metadata = {"help": help, "check": check, "key": key, "shown_default": shown_default, "metavar": metavar}
    return dataclasses.field(default=default, metadata=metadata)


@dataclass(frozen=True)
class SettingField:
    """One user setting, as the CLI, the YAML loader and the docs see it."""

    key: str  # YAML key and flag name with underscores: "d_model", "heads"
    field: str  # the dataclass field: "d_model", "head_dims"
    owner: type  # the dataclass that declares it: TrainConfig, RunConfig, ModelChoice or a family's config
    default: object
    help: str
    check: Check
    shown_default: str | None
    metavar: str | None

    @property
    def flag(self) -> str:
        return "--" + self.key.replace("_", "-")

    @property
    def flag_metavar(self) -> str | None:
        """The flag's value as help shows it: the declared metavar, N for whole numbers, else argparse's."""
        return self.metavar or ("N" if self.check.kind.startswith("a whole number") else None)

    @property
    def default_text(self) -> str:
        """The default as the help and the CLI reference show it."""
        if self.shown_default is not None:
            return self.shown_default
        return self.check.show(self.default)


def settings_fields(*owners: type) -> list[SettingField]:
    """The user settings of the given dataclasses, in declaration order."""
    fields = []
    for owner in owners:
        for f in dataclasses.fields(owner):
            if "check" in f.metadata:
                m = f.metadata
                fields.append(SettingField(m["key"] or f.name, f.name, owner, f.default, m["help"], m["check"],
                                           m["shown_default"], m["metavar"]))
    return fields


def check_model_fields(config) -> None:
    """A model family's config: every setting held to its check (`check_fields`), then its `vocab_size`, which is
    no setting (the tokenizer gives it)."""
    check_fields(config)
    vocab_size = config.vocab_size
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1:
        raise ConfigError(f"vocab_size must be a whole number of at least 1, got {vocab_size!r}")


def check_fields(config) -> None:
    """Hold every setting of a config dataclass (these, and each model family's) to its check; the message
    names the flag."""
    for f in settings_fields(type(config)):
        value = getattr(config, f.field)
        if value is None and (f.default is None or isinstance(f.check, NumberOrOff)):
            continue  # an optional setting left unset, or switched off
        try:
            f.check.validate(value)
        except ValueError as exc:
            raise ConfigError(Named(f.key), f" must be {exc}, got {shown(value)}") from None
