"""Named runs from YAML: the schema, defaults merged under runs, and one clear error per kind of mistake."""

from __future__ import annotations

from pathlib import Path

import pytest

from microgpt.core.errors import ConfigError
from microgpt.settings.known import known_settings
from microgpt.settings.named_runs import load_run

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "configs.yaml"


def write(tmp_path, text: str) -> Path:
    path = tmp_path / "runs.yaml"
    path.write_text(text)
    return path


def test_defaults_are_merged_under_each_run(tmp_path):
    path = write(tmp_path, "defaults: {steps: 100, lr: 0.01}\nruns:\n  a: {steps: 5, heads: [2, 6]}\n  b:\n")
    a = load_run(path, "a")
    assert a.values == {"steps": 5, "lr": 0.01, "heads": (2, 6)}  # a list is widths
    assert a.id == "a" and "run a" in a.origin and str(path) in a.origin
    assert load_run(path, "b").values == {"steps": 100, "lr": 0.01}


def test_numbers_yaml_reads_as_text_and_paths_relative_to_the_file(tmp_path):
    path = write(tmp_path, "runs:\n  a: {lr: 3e-4, max_memory: 512MiB, file: data/t.txt, model: /abs/ck}\n")
    values = load_run(path, "a").values
    assert values["lr"] == pytest.approx(3e-4)
    assert values["max_memory"] == 512 * 1024**2
    assert values["file"] == str(tmp_path / "data" / "t.txt")
    assert values["model"] == "/abs/ck"


@pytest.mark.parametrize("run_id, expected", [(None, "needs --run ID"), ("c", "--run c is not in")])
def test_a_missing_or_unknown_run_lists_the_ids(tmp_path, run_id, expected):
    path = write(tmp_path, "runs:\n  small: {}\n  wide: {d_model: 128}\n")
    with pytest.raises(ConfigError) as error:
        load_run(path, run_id)
    assert expected in str(error.value) and "small, wide" in str(error.value)


def test_an_unknown_setting_is_named_with_the_allowed_ones(tmp_path):
    path = write(tmp_path, "runs:\n  a: {d_modle: 64}\n")
    with pytest.raises(ConfigError) as error:
        load_run(path, "a")
    message = str(error.value)
    assert "'d_modle'" in message and "run a" in message and all(key in message for key in known_settings())


@pytest.mark.parametrize("setting, expected", [
    ("steps: ten", "steps must be a whole number"),
    ("steps: 1.5", "steps must be a whole number"),
    ("steps: true", "steps must be a whole number"),
    ("batch_size: 0", "batch_size must be a whole number of at least 1"),
    ("lr: -1", "lr must be a positive number"),
    ("lr: fast", "lr must be a number"),
    ("random_batches: 1", "random_batches must be true or false"),
    ("heads: [1.5, 2]", "heads must be a head count"),
    ("backend: tpu", "backend must be one of auto, numpy"),
    ("max_memory: lots", "max_memory must be a memory size"),
    ("file: 3", "file must be a path"),
])
def test_wrong_types_name_the_setting_and_what_it_must_be(tmp_path, setting, expected):
    path = write(tmp_path, f"defaults:\n  {setting}\nruns:\n  a:\n")
    with pytest.raises(ConfigError) as error:
        load_run(path, "a")
    key, _, must = expected.partition(" ")  # named with where it was given, and carried as data
    assert str(error.value).startswith(f"{key} (defaults in {path}) {must}") and error.value.key == key


@pytest.mark.parametrize("text, expected", [
    ("runs: {a: {steps: 1}\n", "not valid YAML at line 2"),
    ("- just\n- a list\n", "needs a `runs:` mapping"),
    ("runs: {}\n", "needs a `runs:` mapping"),
    ("runs:\n  a: {}\nextras: 1\n", "unknown top-level key 'extras'"),
    ("runs:\n  a: [1, 2]\n", "must be a mapping of setting: value"),
    ("runs:\n  ../up: {}\n", "must be a name"),
])
def test_malformed_files(tmp_path, text, expected):
    with pytest.raises(ConfigError, match=expected):
        load_run(write(tmp_path, text), "a")


def test_a_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        load_run(tmp_path / "nope.yaml", "a")


def test_the_example_file_has_the_documented_runs():
    runs = {run_id: load_run(EXAMPLE, run_id).values for run_id in ("small", "wide", "exponential", "prime")}
    assert runs["exponential"]["heads"] == "exponential"
    assert runs["prime"]["heads"] == (2, 3, 5, 7, 11, 13, 23)
    assert runs["wide"]["lr"] == 2e-4 and runs["small"]["lr"] == 3e-4  # a run's own setting beats the defaults


def test_a_mistake_in_another_run_is_found_before_anything_trains(tmp_path, capsys):
    from microgpt.cli import main

    (tmp_path / "t.txt").write_text("abcdefgh " * 50)
    path = write(tmp_path, "defaults: {steps: 3, d_model: 8, heads: 2, n_layers: 1, d_ff: 8, seq_len: 8}\n"
                           "runs:\n  a: {}\n  b: {dmodel: 16}\n")
    status = main(["train", str(tmp_path / "t.txt"), "--config", str(path), "--run", "a", "--quiet",
                   "--model", str(tmp_path / "ck")])
    err = capsys.readouterr().err
    assert status == 2 and "run b in" in err and "'dmodel'" in err
    assert not (tmp_path / "ck").exists()


def test_a_run_whose_settings_disagree_is_found_before_another_trains(tmp_path, capsys):
    from microgpt.cli import main

    (tmp_path / "t.txt").write_text("abcdefgh " * 50)
    path = write(tmp_path, "defaults: {steps: 3, d_model: 8, heads: 2, n_layers: 1, d_ff: 8, seq_len: 8}\n"
                           "runs:\n  a: {}\n  b: {warmup: 50}\n")
    status = main(["train", str(tmp_path / "t.txt"), "--config", str(path), "--run", "a", "--quiet",
                   "--model", str(tmp_path / "ck")])
    err = capsys.readouterr().err
    assert status == 2 and "run b in" in err and "--warmup 50" in err
    assert not (tmp_path / "ck").exists()
