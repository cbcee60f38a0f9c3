"""The import graph has the shape the packages' docstrings draw (CONTRIBUTING.md, "The layers"): each package
imports only the packages below it, the library reaches a backend or a family only through their faces, and no
modules import each other in a loop."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "microgpt"

# Each package and what it may import (besides itself), from the ground up; the faces on top may import any
# package below them; microgpt/__init__.py, the lazy `train` and `load`, stands above them all.
MAY_IMPORT = {
    "core": set(),
    "data": {"core"},
    "parallel": {"core"},
    "backends": {"core"},
    "model": {"core", "data", "backends"},
    "settings": {"core", "data", "parallel", "model"},
    "use": {"core", "data", "backends", "model", "settings"},
    "training": {"core", "data", "parallel", "backends", "model", "settings", "use"},
    "studio": {"core", "data", "parallel", "backends", "model", "settings", "use", "training"},
    "export": {"core", "data", "backends", "model", "use"},
    "cli": {"core", "data", "parallel", "backends", "model", "settings", "use", "training", "studio", "export"},
}
TOP_LEVEL_MODULES = {"__init__.py", "__main__.py"}
MAX_TOP_LEVEL_ENTRIES = 13
# What the library (settings, use, training) may import from backends/: the registry, the contract and the
# reference's constants; and from model/: the family protocol and the parts every family shares.
BACKEND_FACES = {"microgpt.backends", "microgpt.backends.base", "microgpt.backends.constants"}
SHARED_MODEL_MODULES = {"family", "params", "thread_split", "decode", "transformer", "attention", "rope", "kv_cache",
                        "checkpoint", "memory"}
LIBRARY = ("settings", "use", "training")
BUILT_ON_GPT = {("model", "lookahead")}  # families whose trunk is GPT's, by design (docs/families.md)


def imports_of(path: Path) -> set[str]:
    """The microgpt modules a file imports (at any depth of the file: late imports count too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "microgpt":
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.split(".")[0] == "microgpt"}
    return found


def package_of(module: str) -> str:
    """'microgpt.training.run' -> 'training'; 'microgpt' -> 'microgpt'."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "microgpt"


def module_name(path: Path) -> str:
    relative = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def test_the_top_level_is_a_few_packages():
    entries = sorted(p.name for p in PACKAGE.iterdir() if p.name != "__pycache__")
    assert len(entries) <= MAX_TOP_LEVEL_ENTRIES, entries
    loose = {name for name in entries if not (PACKAGE / name).is_dir()} - TOP_LEVEL_MODULES
    assert not loose, f"modules outside a package: {sorted(loose)}"
    assert set(MAY_IMPORT) == {name for name in entries if (PACKAGE / name).is_dir()}


def test_each_package_says_what_it_is_and_what_it_may_import_in_a_few_lines():
    for name in MAY_IMPORT:
        docstring = ast.get_docstring(ast.parse((PACKAGE / name / "__init__.py").read_text(encoding="utf-8")))
        assert docstring, f"{name}/__init__.py has no docstring"
        assert 3 <= len(docstring.splitlines()) <= 6, f"{name}/__init__.py: {len(docstring.splitlines())} lines"
        assert "import" in docstring, f"{name}/__init__.py does not say what it imports or what imports it"


def test_every_module_opens_with_a_docstring():
    for module, path in all_modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        assert ast.get_docstring(tree), f"{module} has no docstring saying what it is for"


def test_each_package_imports_only_the_packages_below_it():
    for module, path in all_modules().items():
        own = package_of(module)
        if own not in MAY_IMPORT:  # microgpt/__init__.py and __main__.py: the lazy API and `python -m microgpt`
            continue
        allowed = MAY_IMPORT[own] | {own}
        bad = {m for m in imports_of(path) if package_of(m) not in allowed}
        assert not bad, f"{module} imports {sorted(bad)}, which {own}/ may not import"


def test_the_library_imports_no_concrete_backend_or_family():
    for module, path in all_modules().items():
        if package_of(module) not in LIBRARY:
            continue
        imported = imports_of(path)
        backends = {m for m in imported if m.startswith("microgpt.backends")} - BACKEND_FACES
        assert not backends, f"{module} imports the concrete backend {sorted(backends)}"
        families = {m for m in imported if m.startswith("microgpt.model.") and m.split(".")[2] not in SHARED_MODEL_MODULES}
        assert not families, f"{module} imports the family {sorted(families)}; go through model/family.py"


def test_no_modules_import_each_other_in_a_loop():
    modules = all_modules()
    # a package's face (its __init__.py) is imported with any of its modules; that is not a loop of its own
    graph = {module: {m for m in imports_of(path) if m in modules and m != module and not module.startswith(m + ".")}
             for module, path in modules.items()}
    state: dict[str, str] = {}

    def visit(module: str, trail: list[str]) -> None:
        state[module] = "open"
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                loop = trail[trail.index(target):] + [target] if target in trail else [module, target]
                raise AssertionError(f"an import loop: {' -> '.join(loop)}")
            if target not in state:
                visit(target, [*trail, target])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])


def test_the_train_command_leaves_the_run_to_the_library():
    """cli/train.py builds no model, batches or trainer itself: it calls training/."""
    imported = imports_of(PACKAGE / "cli" / "train.py")
    for library_part in ("microgpt.model", "microgpt.data", "microgpt.backends"):
        assert not {m for m in imported if m.startswith(library_part)}, \
            f"cli/train.py imports {library_part}; that work belongs in training/"


def test_nothing_imports_gpt_but_its_own_modules_and_the_families_built_on_it():
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE)
        if relative.parts[:2] == ("model", "gpt") or relative.parts[:2] in BUILT_ON_GPT:
            continue
        bad = {m for m in imports_of(path) if m.startswith("microgpt.model.gpt")}
        assert not bad, f"{relative} imports {sorted(bad)}; only the registry names the gpt family"


def test_the_errors_a_user_can_cause_import_nothing():
    assert imports_of(PACKAGE / "core" / "errors.py") == set()
