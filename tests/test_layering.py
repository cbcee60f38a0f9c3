"""The import graph has the shape of docs' layers: the CLI and the studio on top (the CLI alone in parsing and
printing), a library below them, the model below that, and the backends at the bottom."""

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


def test_nothing_below_the_studio_imports_it():
    """The studio stands beside the CLI: only its own modules and the `microgpt studio` command import it."""
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] == "studio" or relative == Path("cli", "studio.py"):
            continue
        assert not {m for m in imports_of(path) if m.startswith("microgpt.studio")}, f"{relative} imports the studio"


def test_the_studio_leaves_parsing_and_printing_to_the_cli():
    for name, imported in modules_under("studio").items():
        assert not {m for m in imported if m.startswith("microgpt.cli")}, f"studio/{name} imports the CLI"


def test_the_model_imports_only_backends_the_ground_and_itself():
    allowed = ("microgpt.backends", "microgpt.config", "microgpt.checks", "microgpt.errors", "microgpt.registry",
               "microgpt.model")
    for name, imported in modules_under("model").items():
        bad = {m for m in imported if not m.startswith(allowed)}
        assert not bad, f"{name} imports {sorted(bad)}"


def test_a_backend_never_imports_the_model_or_the_library():
    # the ground the backends stand on: the errors and checks, the registry of names, and the one thread knob
    allowed = ("microgpt.backends", "microgpt.config", "microgpt.checks", "microgpt.threads", "microgpt.registry",
               "microgpt.errors")
    for name, imported in modules_under("backends").items():
        bad = {m for m in imported if not m.startswith(allowed)}
        assert not bad, f"{name} imports {sorted(bad)}"


def test_the_train_command_leaves_the_run_to_the_library():
    """cli/train.py builds no model, batches or trainer itself: it calls run.py."""
    imported = imports_of(PACKAGE / "cli" / "train.py")
    for library_part in ("microgpt.model", "microgpt.data", "microgpt.checkpoint", "microgpt.backends"):
        assert library_part not in imported, f"cli/train.py imports {library_part}; that work belongs in run.py"


GROUND = ("errors.py", "checks.py", "config.py", "presets.py", "data.py", "threads.py", "machine.py", "run_files.py",
          "registry.py", "watchdog.py", *(str(p.relative_to(PACKAGE)) for p in (PACKAGE / "tokenizer").glob("*.py")))


def module_name(relative: str) -> str:
    return "microgpt." + relative.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def test_the_ground_imports_nothing_above_it():
    ground_modules = {module_name(name) for name in GROUND}
    for name in GROUND:
        above = imports_of(PACKAGE / name) - ground_modules
        assert not above, f"{name} imports {sorted(above)}, above the ground"


LAYERS_BELOW_THE_LIBRARY = ("cli", "model", "backends")
# What the library may import from backends/: the registry, the contract and the reference's constants.
BACKEND_FACES = {"microgpt.backends", "microgpt.backends.base", "microgpt.backends.constants"}


def library_modules() -> dict[str, set[str]]:
    return {str(p.relative_to(PACKAGE)): imports_of(p) for p in PACKAGE.rglob("*.py")
            if p.relative_to(PACKAGE).parts[0] not in LAYERS_BELOW_THE_LIBRARY and str(p.relative_to(PACKAGE)) not in GROUND}


def test_the_library_imports_no_concrete_backend_or_family():
    modules = library_modules()
    assert {"run.py", "trainer.py", "checkpoint.py", "memory.py", "sample.py", "evaluate.py"} <= set(modules)
    for name, imported in modules.items():
        backends = {m for m in imported if m.startswith("microgpt.backends")} - BACKEND_FACES
        assert not backends, f"{name} imports the concrete backend {sorted(backends)}"
        families = {m for m in imported if m.startswith("microgpt.model.") and m.count(".") >= 2
                    and m.split(".")[2] not in SHARED_MODEL_MODULES}
        assert not families, f"{name} imports the family {sorted(families)}; go through model/family.py"


SHARED_MODEL_MODULES = {"family", "params", "shards", "decode", "layers", "attention", "rope", "kv_cache"}


BUILT_ON_GPT = {("model", "lookahead")}  # families whose trunk is GPT's, by design (docs/families.md)


def test_nothing_imports_gpt_but_its_own_modules_and_the_families_built_on_it():
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE)
        if relative.parts[:2] == ("model", "gpt") or relative.parts[:2] in BUILT_ON_GPT:
            continue
        bad = {m for m in imports_of(path) if m.startswith("microgpt.model.gpt")}
        assert not bad, f"{relative} imports {sorted(bad)}; only the registry names the gpt family"


def test_the_errors_a_user_can_cause_import_nothing():
    assert imports_of(PACKAGE / "errors.py") == set()
