"""Named runs from a YAML file, for `microgpt train --config FILE --run ID`.

The file has a `runs:` mapping of run id -> settings, and optionally a
`defaults:` mapping merged under every run. Settings are named like the train
flags, with underscores (d_model for --d-model); each is read and checked by
the same `Check` as the flag (core/fields.py declares both):

    defaults:
      steps: 2000
      seq_len: 128
    runs:
      default: {d_model: 64, n_layers: 2, heads: 4}
      exponential: {heads: exponential, n_layers: 2}

Relative `file`, `model` and `graph` paths, and a `tokenizer` that is a tokenizer.json's path, are relative to
the YAML file's directory.
"""

from __future__ import annotations

import stat
from dataclasses import dataclass
from pathlib import Path

import yaml

from microgpt.core.checks import shown
from microgpt.core.errors import ConfigError, Named, Placeholder
from microgpt.data.tokenizer import is_tokenizer_file
from microgpt.settings.known import known_settings

# The settings a run may give, named like the train flags (every user setting of the config dataclasses);
# each is read by its check, which raises ValueError naming what was expected.
PATH_KEYS = ("file", "model", "graph")  # graph: a document's path (an inline document is no path)
MAX_CONFIG_BYTES = 1024 * 1024  # a file of named runs is a few kilobytes
MAX_CONFIG_NODES = 100_000  # values after aliases expand: thousands of runs, far below what an anchor bomb makes


@dataclass
class NamedRun:
    id: str
    values: dict  # validated settings: defaults merged under the run's own
    origin: str  # "run ID in FILE", for messages


def load_run(path: str | Path, run_id: str | None) -> NamedRun:
    """The run `run_id` from the YAML file at `path`, with its defaults merged in. Every run of the file is
    checked, so a mistake in another run is found before this one trains."""
    path = Path(path)
    runs = _load_runs(path)
    ids = ", ".join(runs)
    if run_id is None:
        raise ConfigError(Named("config", str(path)), " needs ", Named("run", Placeholder("ID")),
                          f" to pick a run; its runs are: {ids}")
    if run_id not in runs:
        raise ConfigError(Named("run", run_id), f" is not in {path}; its runs are: {ids}")
    return runs[run_id]


def load_all_runs(path: str | Path) -> list[NamedRun]:
    """Every run of the YAML file at `path`, in file order, each with its defaults merged in and checked."""
    return list(_load_runs(Path(path)).values())


def runs_as_written(path: str | Path) -> dict[str, dict]:
    """Every run of the YAML file at `path` by id, its settings as the file spells them with the defaults merged
    under them, unchecked: what names the runs take, even where one run's settings are wrong."""
    document = _read_yaml(Path(path))
    defaults = document.get("defaults") if isinstance(document.get("defaults"), dict) else {}
    return {run_id: {**defaults, **(settings if isinstance(settings, dict) else {})}
            for run_id, settings in document["runs"].items()}


def _load_runs(path: Path) -> dict[str, NamedRun]:
    document = _read_yaml(path)
    defaults = _check_settings(document.get("defaults"), f"defaults in {path}", path)
    return {run_id: NamedRun(run_id, {**defaults, **_check_settings(settings, f"run {run_id} in {path}", path)},
                             f"run {run_id} in {path}")
            for run_id, settings in document["runs"].items()}


def _read_yaml(path: Path) -> dict:
    try:
        info = path.stat()
    except FileNotFoundError:
        raise ConfigError(Named("config", str(path)), ": no such file") from None
    except OSError as exc:
        raise ConfigError(Named("config", str(path)), f" cannot be read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(Named("config", str(path)), " is not a regular file (a directory, a pipe or a device); give a YAML "
                          "file")
    if info.st_size > MAX_CONFIG_BYTES:
        raise ConfigError(Named("config", str(path)), f" is {info.st_size:,} bytes, more than a file of named runs needs (at "
                          f"most {MAX_CONFIG_BYTES:,}); give the YAML file of runs")
    try:
        with open(path, "rb") as f:
            text = f.read(MAX_CONFIG_BYTES + 1).decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(Named("config", str(path)), f" cannot be read ({exc})") from None
    try:
        _check_expansion(yaml.compose(text, Loader=yaml.SafeLoader), path)
        document = yaml.safe_load(text)
    except RecursionError:
        raise ConfigError(Named("config", str(path)), " nests its values too deeply to read; a file of named runs is a "
                          "mapping of flat settings") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ConfigError(Named("config", str(path)), f" is not valid YAML{where}: {getattr(exc, 'problem', None) or exc}") from None
    if not isinstance(document, dict) or not isinstance(document.get("runs"), dict) or not document["runs"]:
        raise ConfigError(Named("config", str(path)), " needs a `runs:` mapping of run id -> settings (see examples/configs.yaml)")
    unknown = sorted(str(key) for key in document if key not in ("runs", "defaults"))
    if unknown:
        raise ConfigError(Named("config", str(path)), f": unknown top-level key {shown(unknown[0])}; the file has `runs:` and "
                          "optionally `defaults:`")
    for run_id in document["runs"]:
        if not isinstance(run_id, str) or not run_id or "/" in run_id or "\\" in run_id or run_id in (".", ".."):
            raise ConfigError(Named("config", str(path)), f": run id {shown(run_id)} must be a name (it names the checkpoint "
                          "directory)")
    return document


def _check_expansion(root, path: Path) -> None:
    """Refuse YAML whose aliases would expand past MAX_CONFIG_NODES nodes (an "anchor bomb"), or refer to
    themselves, before anything expands them: the nodes are counted over the graph as composed, each shared
    node once per use, with memoised counts."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_nodes:
            raise ConfigError(Named("config", str(path)), ": an alias refers to a node that contains it; write the settings out")
        open_nodes.add(key)
        children = (node.value if isinstance(node, yaml.SequenceNode) else
                    [part for pair in node.value for part in pair] if isinstance(node, yaml.MappingNode) else [])
        total = 1 + sum(size(child) for child in children)
        open_nodes.discard(key)
        if total > MAX_CONFIG_NODES:
            raise ConfigError(Named("config", str(path)), f": its aliases expand to more than {MAX_CONFIG_NODES:,} values; a "
                              "file of named runs needs far fewer, so write the settings out")
        sizes[key] = total
        return total

    if root is not None:
        size(root)


def _check_settings(settings, where: str, path: Path) -> dict:
    """Validated settings of one mapping (a run or the defaults); an empty entry means no settings."""
    if settings is None:
        return {}
    if not isinstance(settings, dict):
        raise ConfigError(f"{where} must be a mapping of setting: value, not {type(settings).__name__}")
    values, keys = {}, known_settings()
    for key, value in settings.items():
        if key not in keys:
            raise ConfigError(f"{where}: unknown setting {shown(key)}; the settings are: {', '.join(keys)}")
        try:
            values[key] = keys[key].check.from_yaml(value)
        except ValueError as exc:
            raise ConfigError(Named(key, origin=where), f" must be {exc}, not {shown(value)}") from None
        if ((key in PATH_KEYS and isinstance(values[key], str))
                or (key == "tokenizer" and is_tokenizer_file(values[key]))):
            values[key] = str(path.parent / values[key])
    return values
