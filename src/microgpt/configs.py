"""Named runs from a YAML file, for `microgpt train --config FILE --run ID`.

The file has a `runs:` mapping of run id -> settings, and optionally a
`defaults:` mapping merged under every run. Settings are named like the train
flags, with underscores (d_model for --d-model); each is checked for its type
here, and its value by the same code that checks the flag:

    defaults:
      steps: 2000
      seq_len: 128
    runs:
      default: {d_model: 64, n_layers: 2, heads: 4}
      exponential: {heads: exponential, n_layers: 2}

Relative `file` and `model` paths are relative to the YAML file's directory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from microgpt.backends import CHOICES
from microgpt.config import ConfigError
from microgpt.memory import parse_size


def _whole(minimum: int | None):
    def check(value):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError("a whole number")
        if minimum is not None and value < minimum:
            raise ValueError(f"a whole number of at least {minimum}")
        return value
    return check


def _positive_number(value):
    if isinstance(value, str):  # YAML 1.1 reads 3e-4 (no dot) as a string
        try:
            value = float(value)
        except ValueError:
            raise ValueError("a number") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise ValueError("a positive number")
    return float(value)


def _flag(value):
    if not isinstance(value, bool):
        raise TypeError("true or false")
    return value


def _heads(value):
    """A count (4), widths ([8, 8, 16, 32] or "8,8,16,32") or a named set, as the --heads text."""
    if isinstance(value, list) and value and all(isinstance(w, int) and not isinstance(w, bool) for w in value):
        return ",".join(str(w) for w in value)
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        return str(value)
    raise ValueError("a head count, a list of widths or a named set")


def _backend(value):
    if value not in CHOICES:
        raise ValueError(f"one of {', '.join(CHOICES)}")
    return value


def _size(value):
    try:
        return parse_size(value)
    except ConfigError:
        raise ValueError("a memory size such as 3GiB, 512MiB or a number of bytes") from None


def _path(value):
    if not isinstance(value, str) or not value:
        raise ValueError("a path")
    return value


# The settings a run may give, named like the train flags; each checker returns the clean value or raises
# TypeError or ValueError naming what was expected.
KEYS = {
    "steps": _whole(0), "seed": _whole(None), "lr": _positive_number, "batch_size": _whole(1),
    "d_model": _whole(1), "n_layers": _whole(1), "d_ff": _whole(1), "heads": _heads, "seq_len": _whole(1),
    "stride": _whole(1), "random_batches": _flag, "val_tokens": _whole(0), "val_interval": _positive_number,
    "eval_every": _whole(0), "save_every": _whole(0), "backend": _backend, "max_memory": _size,
    "gen": _whole(0), "file": _path, "model": _path,
}
PATH_KEYS = ("file", "model")


@dataclass
class NamedRun:
    id: str
    values: dict  # validated settings: defaults merged under the run's own
    origin: str  # "run ID in FILE", for messages


def load_run(path: str | Path, run_id: str | None) -> NamedRun:
    """The run `run_id` from the YAML file at `path`, with its defaults merged in and every value checked."""
    path = Path(path)
    document = _read_yaml(path)
    runs = document["runs"]
    ids = ", ".join(str(key) for key in runs)
    if run_id is None:
        raise ConfigError(f"--config {path} needs --run ID to pick a run; its runs are: {ids}")
    if run_id not in runs:
        raise ConfigError(f"--run {run_id!r} is not in {path}; its runs are: {ids}")
    defaults = _check_settings(document.get("defaults"), f"defaults in {path}", path)
    own = _check_settings(runs[run_id], f"run {run_id} in {path}", path)
    return NamedRun(run_id, {**defaults, **own}, f"run {run_id} in {path}")


def _read_yaml(path: Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"--config {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--config {path} cannot be read ({exc})") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ConfigError(f"--config {path} is not valid YAML{where}: {getattr(exc, 'problem', None) or exc}") from None
    if not isinstance(document, dict) or not isinstance(document.get("runs"), dict) or not document["runs"]:
        raise ConfigError(f"--config {path} needs a `runs:` mapping of run id -> settings (see examples/configs.yaml)")
    unknown = sorted(str(key) for key in document if key not in ("runs", "defaults"))
    if unknown:
        raise ConfigError(f"--config {path}: unknown top-level key {unknown[0]!r}; the file has `runs:` and optionally `defaults:`")
    for run_id in document["runs"]:
        if not isinstance(run_id, str) or not run_id or "/" in run_id or "\\" in run_id or run_id in (".", ".."):
            raise ConfigError(f"--config {path}: run id {run_id!r} must be a name (it names the checkpoint directory)")
    return document


def _check_settings(settings, where: str, path: Path) -> dict:
    """Validated settings of one mapping (a run or the defaults); an empty entry means no settings."""
    if settings is None:
        return {}
    if not isinstance(settings, dict):
        raise ConfigError(f"{where} must be a mapping of setting: value, not {type(settings).__name__}")
    values = {}
    for key, value in settings.items():
        if key not in KEYS:
            raise ConfigError(f"{where}: unknown setting {key!r}; the settings are: {', '.join(KEYS)}")
        try:
            values[key] = KEYS[key](value)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{where}: {key} must be {exc}, not {value!r}") from None
        if key in PATH_KEYS:
            values[key] = str(path.parent / values[key])
    return values
