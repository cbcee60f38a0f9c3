"""Run names that are taken, and the first free ones: the studio never replaces a run without a confirmation.

A name is taken when studio.yaml has a run of that name (with other settings than the ones being saved) or
its checkpoint directory (or that directory's `-best` copy) holds a checkpoint. `guard_name` raises
`NameTaken` for such a name unless the request says `overwrite`; the app answers it with 409 {"error": one
line naming what is there, "exists": true, "suggested": the first free name}. `suggest` gives that name
(NAME-2, NAME-3, ..., or one past a trailing -N) and `first_free` the page's default ("run1", "run2", ...).
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import yaml

from microgpt.core.errors import ConfigError
from microgpt.model.checkpoint import is_checkpoint
from microgpt.settings.named_runs import load_all_runs, runs_as_written
from microgpt.training.run_files import DEFAULT_ROOT, RunPaths
from microgpt.training.run_list import row_of

NUMBERED = re.compile(r"(.*)-(\d{1,9})")
MAX_NAME = 64  # as check_run_name allows


class NameTaken(ConfigError):
    """A run or checkpoint of that name exists; `suggested` is the first free name like it."""

    def __init__(self, message: str, suggested: str):
        super().__init__(message)
        self.suggested = suggested


def yaml_runs(workspace) -> dict[str, dict]:
    """The runs of studio.yaml by name, their own settings with the defaults merged (none without the file)."""
    if not workspace.config.is_file():
        return {}
    return {named.id: named.values for named in load_all_runs(workspace.config)}


def checkpoint_dir(workspace, name: str, values: dict | None) -> Path:
    """Where run `name` writes its checkpoint: its `model` setting, else checkpoints/NAME."""
    model = (values or {}).get("model")
    return workspace.inside(model) if isinstance(model, str) and model else workspace.root / DEFAULT_ROOT / name


def what_is_there(workspace, name: str, runs: dict[str, dict]) -> str | None:
    """The words for what run `name` would replace (its studio.yaml entry, its checkpoint), or None."""
    values = runs.get(name)
    place = checkpoint_dir(workspace, name, values)
    best = RunPaths(place).best
    found = place if is_checkpoint(place) else best if is_checkpoint(best) else None
    parts = []
    if values is not None:
        parts.append(f"in {workspace.config.name} ({values.get('family') or 'gpt'})")
    if found is not None:
        row = row_of(found, workspace.relative, {})
        steps = f"step {row['step']} of {row['steps']}" if row["steps"] else f"step {row['step']}"
        parts.append(f"with a checkpoint {workspace.relative(found)} ({row['family'] or 'unknown family'}, "
                     f"{row['status']}, {steps})")
    elif values is not None:
        parts.append("not trained yet")
    return ", ".join(parts) if parts else None


def is_free(workspace, name: str, runs: dict[str, dict]) -> bool:
    return what_is_there(workspace, name, runs) is None


def suggest(workspace, name: str, runs: dict[str, dict] | None = None) -> str:
    """The first free name after `name`: NAME-2, NAME-3, ... (one past N for a NAME-N)."""
    runs = yaml_runs(workspace) if runs is None else runs
    numbered = NUMBERED.fullmatch(name)
    stem, start = (numbered.group(1), int(numbered.group(2)) + 1) if numbered else (name, 2)
    for n in itertools.count(start):
        candidate = f"{stem[: MAX_NAME - len(str(n)) - 1]}-{n}"
        if is_free(workspace, candidate, runs):
            return candidate
    raise AssertionError("unreachable")


def first_free(workspace, base: str = "run") -> str:
    """The first of base1, base2, ... that is free: the page's default run name. studio.yaml's runs are read as
    written, so a mistake in one run's settings (which saving and training refuse, naming it) does not keep the
    page from its default name."""
    runs = runs_as_written(workspace.config) if workspace.config.is_file() else {}
    return next(name for name in (f"{base}{n}" for n in itertools.count(1))
                if name not in runs and is_free(workspace, name, runs))


def raw_entry(workspace, name: str):
    """Run `name` of studio.yaml as the file spells it (no defaults merged), or None."""
    if not workspace.config.is_file():
        return None
    document = yaml.safe_load(workspace.config.read_text(encoding="utf-8"))
    return (document.get("runs") or {}).get(name) if isinstance(document, dict) else None


def has_checkpoint(workspace, name: str, runs: dict[str, dict]) -> bool:
    place = checkpoint_dir(workspace, name, runs.get(name))
    return is_checkpoint(place) or is_checkpoint(RunPaths(place).best)


def guard_name(workspace, name: str, settings: dict | None = None, overwrite: bool = False) -> None:
    """A NameTaken error, unless `overwrite`, where saving `settings` as run `name` would replace a run or sit on
    a checkpoint (saving the very settings studio.yaml holds replaces nothing), or where starting run `name`
    afresh (settings None) would replace its checkpoint."""
    if overwrite:
        return
    runs = yaml_runs(workspace)  # read first: a studio.yaml the CLI cannot read is refused here
    if settings is not None and raw_entry(workspace, name) == settings:
        return
    if settings is None and not has_checkpoint(workspace, name, runs):
        return
    there = what_is_there(workspace, name, runs)
    if there is not None:
        suggested = suggest(workspace, name, runs)
        raise NameTaken(f"run {name} exists ({there}); replace it, or save as {suggested}", suggested)
