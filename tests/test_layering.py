"""The import graph has the shape of docs' layers: the CLI on top and alone in parsing and printing, a library
below it, the model below that, and the backends at the bottom."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "microgpt"


def imports_of(path: Path) -> set[str]:
    """The microgpt modules a file imports (at any depth of the file: late imports count too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("microgpt"):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("microgpt")}
    return found


def modules_under(folder: str) -> dict[str, set[str]]:
    return {str(p.relative_to(PACKAGE)): imports_of(p) for p in (PACKAGE / folder).rglob("*.py")}


def test_nothing_below_the_cli_imports_it():
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] in ("cli", "__main__.py"):
            continue
        assert not {m for m in imports_of(path) if m.startswith("microgpt.cli")}, f"{relative} imports the CLI"


def test_the_model_imports_only_backends_config_and_itself():
    allowed = ("microgpt.backends", "microgpt.config", "microgpt.checks", "microgpt.model")
    for name, imported in modules_under("model").items():
        bad = {m for m in imported if not m.startswith(allowed)}
        assert not bad, f"{name} imports {sorted(bad)}"


def test_a_backend_never_imports_the_model_or_the_library():
    # the ground the backends stand on: the settings' errors and checks, and the one thread knob
    allowed = ("microgpt.backends", "microgpt.config", "microgpt.checks", "microgpt.threads")
    for name, imported in modules_under("backends").items():
        bad = {m for m in imported if not m.startswith(allowed)}
        assert not bad, f"{name} imports {sorted(bad)}"


def test_the_train_command_leaves_the_run_to_the_library():
    """cli/train.py builds no model, batches or trainer itself: it calls run.py."""
    imported = imports_of(PACKAGE / "cli" / "train.py")
    for library_part in ("microgpt.model", "microgpt.data", "microgpt.checkpoint", "microgpt.backends"):
        assert library_part not in imported, f"cli/train.py imports {library_part}; that work belongs in run.py"


GROUND = ("errors.py", "checks.py", "config.py", "presets.py", "data.py", "threads.py", "machine.py", "run_files.py")
# What the ground may still reach above itself, named so it shrinks: checks.py reads the backend registry's names
# and the presets for the --backend and --preset choices (lazily, at first use).
GROUND_REACHES_UP = {"checks.py": {"microgpt.backends", "microgpt.presets"}}


def test_the_ground_imports_nothing_above_it():
    ground_modules = {f"microgpt.{name.removesuffix('.py')}" for name in GROUND}
    for name in GROUND:
        imported = imports_of(PACKAGE / name)
        above = imported - ground_modules - GROUND_REACHES_UP.get(name, set())
        assert not above, f"{name} imports {sorted(above)}, above the ground"


def test_the_errors_a_user_can_cause_import_nothing():
    assert imports_of(PACKAGE / "errors.py") == set()
