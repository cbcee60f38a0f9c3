"""Settings: each comes from the highest of default < named run < checkpoint < explicit value, and the configs
built from nothing given are the dataclasses' own defaults."""

from __future__ import annotations

import pytest

from microgpt.core.errors import ConfigError, as_flag, as_keyword
from microgpt.model.gpt import GPTConfig
from microgpt.settings.named_runs import NamedRun
from microgpt.settings.sources import Settings
from microgpt.settings.training import RunConfig, TrainConfig


def test_nothing_given_is_the_declared_defaults():
    settings = Settings()
    assert settings.train_config() == TrainConfig()
    assert RunConfig(**{key: settings.value(key) for key in ("backend", "max_memory", "gen", "file", "model")}) == RunConfig()
    assert settings.model_config(vocab_size=50) == GPTConfig(vocab_size=50)
    default = GPTConfig(vocab_size=50)
    assert default.head_dims == (default.d_model // 4,) * 4  # 4 equal heads of the default width


def test_precedence_default_named_saved_explicit():
    named = NamedRun("r", {"steps": 7, "lr": 0.5, "seed": 3}, "run r in f.yaml")
    settings = Settings({"steps": 9}, named).resumed_from({"steps": 8, "lr": 0.25})
    assert settings.value("steps") == 9  # explicit beats the checkpoint
    assert settings.value("lr") == 0.25  # the checkpoint beats the named run
    assert settings.value("seed") == 3  # the named run beats the default
    assert settings.value("batch_size") == TrainConfig().batch_size
    assert settings.given("seed") and not settings.given("batch_size")
    assert as_flag(settings.mention("seed")) == "seed: 3 (run r in f.yaml)"
    assert as_flag(settings.mention("steps")) == "--steps 9" and as_keyword(settings.mention("steps")) == "steps=9"


def test_values_from_python_are_read_and_checked_like_flags():
    settings = Settings({"heads": [8, 8, 16], "max_memory": "1GiB", "lr": "3e-4"})
    assert settings.model_config(10).head_dims == (8, 8, 16) and settings.model_config(10).d_model == 32
    assert settings.value("max_memory") == 1024**3 and settings.value("lr") == 3e-4
    with pytest.raises(ConfigError, match="--batch-size must be a whole number of at least 1"):
        Settings({"batch_size": 0})
    with pytest.raises(ConfigError, match="unknown setting 'd_modle'"):
        Settings({"d_modle": 3})


def test_heads_that_contradict_d_model_name_both_sources():
    with pytest.raises(ConfigError, match="--heads exponential makes the width 63, not --d-model 64"):
        Settings({"heads": "exponential", "d_model": 64}).model_config(10)


def test_a_config_checks_every_setting_however_it_is_made():
    with pytest.raises(ConfigError, match="--steps must be a whole number of at least 1"):
        TrainConfig(steps=0)
    with pytest.raises(ConfigError, match="--backend must be one of"):
        RunConfig(backend="tpu")
