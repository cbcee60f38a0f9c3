"""Where each setting of a run comes from, and the configs built from them.

Sources, lowest to highest precedence: the default declared with the setting
(settings/training.py, and each model family's config), the preset (`--preset`,
or a named run's `preset:`; presets.py), the named run of `--config`
(named_runs.py), the checkpoint being resumed (its family, tokenizer, training
settings and corpus), and an explicit flag or keyword. `Settings` answers "what
is this setting, and who said so", and builds the family's config, the
`TrainConfig` and the `RunConfig` of a run, which training/resolve.py reads
once; `known_settings` (known.py) is every setting there is.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from microgpt.core.checks import shown
from microgpt.core.errors import ConfigError, Named, Note, Placeholder
from microgpt.core.fields import settings_fields
from microgpt.core.registry import FAMILIES
from microgpt.data.tokenizer import tokenizer_kind
from microgpt.model.family import family
from microgpt.settings.known import family_keys, known_settings
from microgpt.settings.named_runs import NamedRun, load_all_runs
from microgpt.settings.presets import PRESETS
from microgpt.settings.training import RunConfig, TrainConfig


class Settings:
    """Each setting from its explicit value, else the checkpoint (for the keys it keeps), else the named run,
    else the preset, else the declared default."""

    def __init__(self, explicit: dict | None = None, named: NamedRun | None = None, saved: dict | None = None):
        fields = known_settings()
        explicit = {key: value for key, value in (explicit or {}).items() if value is not None}
        unknown = sorted(set(explicit) - set(fields))
        if unknown:
            raise ConfigError(f"unknown setting {shown(unknown[0])}; the settings are: {', '.join(fields)}")
        for key, value in explicit.items():  # a flag's value is clean already; one from Python is read here
            try:
                explicit[key] = fields[key].check.from_yaml(str(value) if isinstance(value, Path) else value)
            except ValueError as exc:
                raise ConfigError(Named(key), f" must be {exc}, not {shown(value)}") from None
        self.fields = fields
        self.explicit, self.named, self.saved = explicit, named, saved or {}
        preset = explicit.get("preset") or (named.values.get("preset") if named is not None else None)
        self.preset_name: str | None = preset
        self.preset: dict = PRESETS[preset] if preset else {}

    def resumed_from(self, saved: dict) -> Settings:
        """These settings over a checkpoint's saved ones (its family, tokenizer, training settings, corpus file)."""
        return Settings(self.explicit, self.named, saved)

    def given(self, key: str) -> bool:
        """Set explicitly or by the named run (not a default, a preset or the checkpoint)."""
        return key in self.explicit or (self.named is not None and key in self.named.values)

    def value(self, key: str):
        if key == "family" and not self._set_anywhere(key):
            return self._selected_family()
        if key in self.explicit:
            return self.explicit[key]
        if key in self.saved:
            return self.saved[key]
        if self.named is not None and key in self.named.values:
            return self.named.values[key]
        if key in self.preset:
            return self.preset[key]
        return self.fields[key].default

    def _set_anywhere(self, key: str) -> bool:
        return key in self.explicit or key in self.saved or (self.named is not None and key in self.named.values)

    def _selected_family(self) -> str:
        """Without --family: the family whose choosing setting is given (--cooperative: ensemble), else the
        preset's or the declared default."""
        for name in FAMILIES:
            chooser = getattr(family(name), "SELECTED_BY", None)
            if chooser is not None and self.given(chooser):
                return name
        return self.preset.get("family", self.fields["family"].default)

    def mention(self, key: str) -> Named:
        """A given setting as a message names it (core/errors.py): with its value, and with the named run it came
        from where it came from one; each front end words it."""
        from_run = key not in self.explicit and self.named is not None and key in self.named.values
        return Named(key, self.value(key), self.named.origin if from_run else None)

    def path(self, key: str) -> Path | None:
        value = self.value(key)
        return None if value is None else Path(value)

    @property
    def family(self) -> ModuleType:
        """The family module these settings choose (--family)."""
        return family(self.value("family"))

    def model_config(self, vocab_size: int):
        """The chosen family's config from the given settings and the defaults."""
        return self._config_of(self.family, vocab_size)

    def _config_of(self, kind: ModuleType, vocab_size: int):
        if hasattr(kind, "config_from"):
            return kind.config_from(self, vocab_size)
        return kind.Config(vocab_size=vocab_size, **{f.field: self.value(f.key) for f in settings_fields(kind.Config)})

    def train_config(self) -> TrainConfig:
        return TrainConfig(**{f.field: self.value(f.key) for f in settings_fields(TrainConfig)})

    def run_config(self) -> RunConfig:
        return RunConfig(**{f.field: self.value(f.key) for f in settings_fields(RunConfig)})

    def origin_of_value(self, key: str) -> str:
        """Who set a setting's value, for a line about it: the setting as given ("--val-tokens 0"), the
        checkpoint's, the preset's, or its default."""
        if self.given(key):
            return Note(self.mention(key))
        if key in self.saved:
            return f"the checkpoint's {key}"
        if key in self.preset:
            return f"the {self.preset_name} preset"
        return Note(Named(key), "'s default")

    def validation_settings_given(self) -> tuple[Named, ...]:
        """The validation settings given (--eval-every 5), each of which does nothing where no text is held out."""
        return tuple(self.mention(key) for key in ("eval_every", "val_interval") if self.given(key))

    def check_all_used(self, config: TrainConfig, save: bool = True, compare: bool = False) -> None:
        """Refuse a setting given (by a flag or the named run) that would do nothing with the others, in one line
        naming it and what it needs, rather than accept it in silence. A named run's setting that a flag makes
        useless (`--val-tokens 0` over a run's `eval_every`) is not refused: the flag overrides the run. A
        `config.val_tokens` of None (a tenth of a text not yet read) leaves the validation settings to be checked
        against the text (`validation_settings_given`)."""
        no_held_out = ((Named("val_tokens"), " is 0") if self.given("val_tokens") or config.val_tokens else
                       ("the text is too short to hold out a tenth of it; give ", Named("val_tokens", Placeholder("N"))))
        no_decay = ("a constant schedule does not decay; add ", Named("lr_schedule", "cosine"), " or drop it")
        flag = None  # the cause is an invocation option (save, compare), never a named run's
        chosen = self.value("family")
        own = set(family_keys(self.family))
        unsaved = ("nothing is saved with ", Named("save", False))
        unused = [  # (the setting, what makes it useless, the setting that does so, why)
            ("eval_every", config.val_tokens == 0, "val_tokens",
             ("there is no held-out text to validate on (", *no_held_out, ")")),
            ("val_interval", config.val_tokens == 0, "val_tokens",
             ("there is no held-out text to validate on (", *no_held_out, ")")),
            ("val_interval", config.validate_every != 0, "eval_every",
             ("it times validation only with ", Named("eval_every", 0), " (by steps is the default); add ",
              Named("eval_every", 0), " or drop it")),
            ("stride", config.random_batches, "random_batches",
             ("it spaces the windows of the sequential walk, and batches are random windows; add ",
              Named("random_batches", False), " or drop it")),
            ("min_lr", config.lr_schedule == "constant", "lr_schedule", no_decay),
            ("decay_steps", config.lr_schedule == "constant", "lr_schedule", no_decay),
            ("vocab_size", tokenizer_kind(self.value("tokenizer")).default_vocab_size is None, "tokenizer",
             (f"the {self.value('tokenizer')} tokenizer takes no vocabulary size; add ", Named("tokenizer", "bpe"),
              " or drop it")),
            ("save_every", not save, flag, unsaved),
            ("model", not save, flag, unsaved),
            ("log", not save, flag, unsaved),
            ("gen", compare and self.value("gen") > 0, flag, (Named("compare"), " prints no sample")),
        ]
        unused += [(key, True, "family", (f"the {chosen} family has no {key}", *self._owner_hint(name)))
                   for name in FAMILIES for key in family_keys(family(name)) if key not in own]
        for key, useless, cause, why in unused:
            overridden = key not in self.explicit and (cause is flag or cause in self.explicit)
            if useless and self.given(key) and not overridden:
                raise ConfigError(self.mention(key), " does nothing here: ", *why)

    def _owner_hint(self, name: str) -> tuple:
        """How to choose the family `name` that a setting belongs to, for a message."""
        chooser = getattr(family(name), "SELECTED_BY", None)
        return (f" (it is the {name} family's: add ", Named(chooser, Placeholder("...")) if chooser else Named("family", name), ")")

    def check_shape_against(self, family_name: str, config, checkpoint: Path,
                            fix: tuple = ("drop it to resume, or train a new model with ", Named("model"))) -> None:
        """On resume (or fine-tuning) the family and shape come from the checkpoint; an explicit setting that
        disagrees is an error, whose message ends with `fix`. Each shape setting given is read on its own over
        the checkpoint's others (so --heads 4 means four heads of the checkpoint's d_model)."""
        if "family" in self.explicit and self.explicit["family"] != family_name:
            raise ConfigError(self.mention("family"), f" does not match the checkpoint {checkpoint}, a {family_name} "
                              "model; ", *fix)
        kind = family(family_name)
        shape = {f.key: (f.field, getattr(config, f.field)) for f in settings_fields(kind.Config)}
        for key, (field, actual) in shape.items():
            if key not in self.explicit:
                continue
            alone = Settings({key: self.explicit[key]}, None,
                             {other: value for other, (_, value) in shape.items() if other != key})
            try:
                agrees = getattr(alone._config_of(kind, config.vocab_size), field) == actual
            except ConfigError:
                agrees = False
            if not agrees:
                has = (f"another graph (its document is in {checkpoint}/config.json)" if isinstance(actual, dict)
                       else actual)
                raise ConfigError(self.mention(key), f" does not match the checkpoint {checkpoint}, which has {has}; ",
                                  *fix)


def check_named_runs(path: Path) -> None:
    """Every run of a --config file built into its configs (without the command line's flags), so that a
    mistake in any run is found before the first one trains."""
    for named in load_all_runs(path):
        settings = Settings({}, named)
        try:
            settings.train_config()
            settings.model_config(vocab_size=1)  # the vocabulary comes from the text; any size checks the shape
        except ConfigError as exc:
            raise ConfigError(f"{named.origin}: ", *exc.parts, key=exc.key) from None
