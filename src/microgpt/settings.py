"""Where each setting of a run comes from, and the configs built from them.

Sources, lowest to highest precedence: the default declared in config.py, the
preset (`--preset`, or a named run's `preset:`; presets.py), the named run of
`--config` (named_runs.py), the checkpoint being resumed (its training settings
and corpus), and an explicit flag or keyword. `Settings`
answers "what is this setting, and who said so" for the run module, and builds
the `ModelConfig`, `TrainConfig` and `RunConfig` of a run.
"""

from __future__ import annotations

from pathlib import Path

from microgpt.checks import shown
from microgpt.config import ModelConfig, TrainConfig, parse_heads, settings_fields
from microgpt.errors import ConfigError
from microgpt.named_runs import NamedRun, load_all_runs
from microgpt.presets import PRESETS

FIELDS = {f.key: f for f in settings_fields()}
SHAPE_KEYS = tuple(f.key for f in settings_fields(ModelConfig))  # d_model, n_layers, heads, d_ff, seq_len


class Settings:
    """Each setting from its explicit value, else the checkpoint (for the keys it keeps), else the named run,
    else the preset, else the declared default."""

    def __init__(self, explicit: dict | None = None, named: NamedRun | None = None, saved: dict | None = None):
        explicit = {key: value for key, value in (explicit or {}).items() if value is not None}
        unknown = sorted(set(explicit) - set(FIELDS))
        if unknown:
            raise ConfigError(f"unknown setting {shown(unknown[0])}; the settings are: {', '.join(FIELDS)}")
        for key, value in explicit.items():  # a flag's value is clean already; one from Python is read here
            try:
                explicit[key] = FIELDS[key].check.from_yaml(str(value) if isinstance(value, Path) else value)
            except ValueError as exc:
                raise ConfigError(f"{FIELDS[key].flag} must be {exc}, not {shown(value)}") from None
        self.explicit, self.named, self.saved = explicit, named, saved or {}
        preset = explicit.get("preset") or (named.values.get("preset") if named is not None else None)
        self.preset: dict = PRESETS[preset] if preset else {}

    def resumed_from(self, saved: dict) -> Settings:
        """These settings over a checkpoint's saved ones (its training settings, corpus file)."""
        return Settings(self.explicit, self.named, saved)

    def given(self, key: str) -> bool:
        """Set explicitly or by the named run (not a default, a preset or the checkpoint)."""
        return key in self.explicit or (self.named is not None and key in self.named.values)

    def value(self, key: str):
        if key in self.explicit:
            return self.explicit[key]
        if key in self.saved:
            return self.saved[key]
        if self.named is not None and key in self.named.values:
            return self.named.values[key]
        if key in self.preset:
            return self.preset[key]
        return FIELDS[key].default

    def origin(self, key: str) -> str:
        """Where a given setting came from, for messages: "--d-model" or "d_model (run ID in FILE)"."""
        if key in self.explicit or self.named is None:
            return FIELDS[key].flag
        return f"{key} ({self.named.origin})"

    def describe(self, key: str) -> str:
        """A given setting with its value: "--heads 4" or "heads: 4 (run ID in FILE)"."""
        if key in self.explicit or self.named is None:
            return f"{self.origin(key)} {self.value(key)}"
        return f"{key}: {self.value(key)} ({self.named.origin})"

    def path(self, key: str) -> Path | None:
        value = self.value(key)
        return None if value is None else Path(value)

    def model_config(self, vocab_size: int) -> ModelConfig:
        """The model shape from the given settings and the defaults."""
        d_model = self.value("d_model")
        heads = self.value("heads")
        if heads is None:
            return ModelConfig(vocab_size=vocab_size, d_model=d_model, n_layers=self.value("n_layers"),
                               d_ff=self.value("d_ff"), seq_len=self.value("seq_len"))
        head_dims, heads_d_model = parse_heads(str(heads), d_model)
        if self.given("d_model") and heads_d_model != d_model:
            raise ConfigError(f"{self.describe('heads')} makes d_model {heads_d_model}, but {self.origin('d_model')} "
                              f"is {d_model}; drop one of them")
        return ModelConfig(vocab_size=vocab_size, d_model=heads_d_model, head_dims=head_dims,
                           n_layers=self.value("n_layers"), d_ff=self.value("d_ff"), seq_len=self.value("seq_len"))

    def train_config(self) -> TrainConfig:
        return TrainConfig(**{f.field: self.value(f.key) for f in settings_fields(TrainConfig)})

    def check_all_used(self, config: TrainConfig, save: bool = True, compare: bool = False) -> None:
        """Refuse a setting given (by a flag or the named run) that would do nothing with the others, in one line
        naming it and what it needs, rather than accept it in silence. A named run's setting that a flag makes
        useless (`--val-tokens 0` over a run's `eval_every`) is not refused: the flag overrides the run."""
        no_held_out = ("--val-tokens is 0" if self.given("val_tokens") or config.val_tokens else
                       "the text is too short to hold out a tenth of it; give --val-tokens N")
        no_decay = "a constant schedule does not decay; add --lr-schedule cosine or drop it"
        flag = None  # the cause is an invocation flag (--no-save, --compare): always the command line's
        unused = [  # (the setting, what makes it useless, the setting that does so, why)
            ("eval_every", config.val_tokens == 0, "val_tokens",
             f"there is no held-out text to validate on ({no_held_out})"),
            ("val_interval", config.val_tokens == 0, "val_tokens",
             f"there is no held-out text to validate on ({no_held_out})"),
            ("val_interval", config.validate_every != 0, "eval_every",
             "it times validation only with --eval-every 0 (by steps is the default); add --eval-every 0 or drop it"),
            ("stride", config.random_batches, "random_batches",
             ("it spaces the windows of the sequential walk, and batches are random windows; "
              "add --no-random-batches or drop it")),
            ("min_lr", config.lr_schedule == "constant", "lr_schedule", no_decay),
            ("decay_steps", config.lr_schedule == "constant", "lr_schedule", no_decay),
            ("save_every", not save, flag, "nothing is saved with --no-save"),
            ("model", not save, flag, "nothing is saved with --no-save"),
            ("gen", compare and self.value("gen") > 0, flag, "--compare prints no sample"),
        ]
        for key, useless, cause, why in unused:
            overridden = key not in self.explicit and (cause is flag or cause in self.explicit)
            if useless and self.given(key) and not overridden:
                raise ConfigError(f"{self.describe(key)} does nothing here: {why}")

    def check_shape_against(self, config: ModelConfig, checkpoint: Path,
                            fix: str = "drop it to resume, or train a new model with --model") -> None:
        """On resume (or fine-tuning) the shape comes from the checkpoint; an explicit shape setting that disagrees
        is an error, whose message ends with `fix`."""
        for key in SHAPE_KEYS:
            if key not in self.explicit:
                continue
            wanted = self.value(key)
            actual = getattr(config, FIELDS[key].field)
            if key == "heads":
                wanted = parse_heads(str(wanted), config.d_model)[0]
            if wanted != actual:
                raise ConfigError(
                    f"{self.describe(key)} does not match the checkpoint {checkpoint}, which has {actual}; {fix}"
                )


def check_named_runs(path: Path) -> None:
    """Every run of a --config file built into its configs (without the command line's flags), so that a
    mistake in any run is found before the first one trains."""
    for named in load_all_runs(path):
        settings = Settings({}, named)
        try:
            settings.train_config()
            settings.model_config(vocab_size=1)  # the vocabulary comes from the text; any size checks the shape
        except ConfigError as exc:
            raise ConfigError(f"{named.origin}: {exc}") from None
