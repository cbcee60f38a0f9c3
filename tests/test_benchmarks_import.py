"""Every benchmark script imports against today's library (they run by hand, so nothing else would notice an
API they use moving); a script that needs an optional package that is missing here skips with its name."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPTS = sorted((Path(__file__).resolve().parents[1] / "benchmarks").glob("*.py"))
OPTIONAL = {"torch", "cupy", "mpi4py"}  # packages a benchmark may need that the test install may lack


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_the_script_imports(script, monkeypatch):
    spec = importlib.util.spec_from_file_location(f"benchmark_{script.stem}", script)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)  # runs the module's top level, not its main()
    except ModuleNotFoundError as exc:
        if exc.name in OPTIONAL:
            pytest.skip(f"{script.name} needs {exc.name}, which is not installed here")
        raise
