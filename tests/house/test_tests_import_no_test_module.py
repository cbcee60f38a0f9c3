"""A test module imports no other test module (CONTRIBUTING.md, "The tests"): what several files share is a
helper module in tests/ without the `test_` prefix, or a fixture in a conftest.py. Importing a test module runs
its module-level code (its `need` skips, its fixtures) a second time, under another name."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def imported_test_modules(source: str) -> list[str]:
    """The modules named test_* (as the last part of a dotted name) that `source` imports."""
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
    return [name for name in names if name.rsplit(".", 1)[-1].startswith("test_")]


def test_no_test_module_imports_another():
    found = [f"{path.relative_to(TESTS)}: {', '.join(names)}" for path in sorted(TESTS.rglob("*.py"))
             if (names := imported_test_modules(path.read_text(encoding="utf-8")))]
    assert not found, ("test modules importing test modules (move what they share to a helper in tests/):\n"
                       + "\n".join(found))


def test_an_import_of_a_test_module_is_found():
    assert imported_test_modules("from test_studio_graph_api import check\nimport tests.model.test_x\n"
                                 "from studio_graphs import check\nimport pytest\n") == [
        "test_studio_graph_api", "tests.model.test_x"]
