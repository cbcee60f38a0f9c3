"""Every benchmark script imports against today's library (they run by hand, so nothing else would notice an
API they use moving); a script that needs an optional package that is missing here skips with its name and
the extra that brings it (tests/extras.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from extras import EXTRAS, NOT_IN_AN_EXTRA, missing_reason

SCRIPTS = sorted((Path(__file__).resolve().parents[2] / "benchmarks").glob("*.py"))
OPTIONAL = {*EXTRAS, *NOT_IN_AN_EXTRA}  # packages a benchmark may need that the test extra does not bring


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_the_script_imports(script, monkeypatch):
    spec = importlib.util.spec_from_file_location(f"benchmark_{script.stem}", script)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)  # runs the module's top level, not its main()
    except (ModuleNotFoundError, SystemExit) as exc:
        # a script may also exit with its own message when an import fails: the import is then its context
        missing = exc if isinstance(exc, ModuleNotFoundError) else exc.__context__
        if isinstance(missing, ModuleNotFoundError) and (missing.name or "").split(".")[0] in OPTIONAL:
            pytest.skip(f"{script.name}: {missing_reason(missing.name)}")
        raise
