"""The house stays legible: no function of the run layer needs scrolling, the modules that resolve and prepare
a run and the train command stay short, and no help text types a default that its declaration holds."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "microgpt"
MAX_FUNCTION_LINES = 60  # a function of training/ reads on one screen
MAX_PLAN_LINES = 300  # the modules that resolve and build a run
MAX_TRAIN_COMMAND_LINES = 220  # cli/train.py: parse and hand over


def test_no_function_of_the_run_layer_is_over_sixty_lines():
    for path in (PACKAGE / "training").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                assert lines <= MAX_FUNCTION_LINES, f"{path.name}: {node.name} is {lines} lines"


def test_the_modules_that_resolve_and_plan_a_run_are_short():
    for name in ("resolve.py", "plan.py"):
        lines = len((PACKAGE / "training" / name).read_text(encoding="utf-8").splitlines())
        assert lines < MAX_PLAN_LINES, f"training/{name} is {lines} lines"


def test_the_train_command_stays_thin():
    lines = len((PACKAGE / "cli" / "train.py").read_text(encoding="utf-8").splitlines())
    assert lines < MAX_TRAIN_COMMAND_LINES, f"cli/train.py is {lines} lines"


def typed_text(node: ast.AST) -> str:
    """The literal text of a help expression, with each value an f-string fills in standing as {}."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(typed_text(part) if isinstance(part, ast.Constant) else "{}" for part in node.values)
    if isinstance(node, ast.BinOp):
        return typed_text(node.left) + typed_text(node.right)
    if isinstance(node, ast.Call):  # help_text("...")
        return "".join(typed_text(arg) for arg in node.args)
    return "{}"


def help_strings(path: Path) -> list[str]:
    """The help texts of a module's add_argument calls and of its {"help": ...} flag tables, as typed."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            found += [typed_text(keyword.value) for keyword in node.keywords if keyword.arg == "help"]
        if isinstance(node, ast.Dict):
            found += [typed_text(value) for key, value in zip(node.keys, node.values)
                      if isinstance(key, ast.Constant) and key.value == "help"]
    return found


def test_no_help_text_types_a_default_the_declaration_holds():
    """Defaults reach the help from the settings' declarations (cli/common.py adds them); one typed by hand
    can drift from the real one."""
    for path in (PACKAGE / "cli").glob("*.py"):
        for text in help_strings(path):
            typed = text.replace("(default: {})", "")  # a default filled in from its declaration
            assert "default:" not in typed, f"cli/{path.name}: {text!r}"
