"""Every graph case by name: the OP_CASES (one per op of microgpt.model.graph.ops.ALL, the fused ones included)
and the VARIANT_CASES of every tests/graph_cases*.py module, and what building one needs (its alphabet, whether
it passes the causality check, a seed of its own), for the graph's op tests (tests/graph/test_graph_ops.py) and
the export's (tests/export/test_export_ops.py)."""

from __future__ import annotations

import importlib
import zlib
from pathlib import Path

import graph_cases
from graph_gradcheck import build, case_document

CASE_MODULES = [importlib.import_module(path.stem) for path in sorted(Path(__file__).parent.glob("graph_cases*.py"))]
OP_CASES = {name: (module, case) for module in CASE_MODULES for name, case in module.OP_CASES.items()}
CASES = {**OP_CASES, **{f"variant:{name}": (module, case) for module in CASE_MODULES
                        for name, case in getattr(module, "VARIANT_CASES", {}).items()}}  # name -> (module, case)


def _named(attribute: str) -> set[str]:
    """The case keys a module lists under `attribute` (by its own names, variants unprefixed)."""
    return {key for module in CASE_MODULES for name in getattr(module, attribute, ())
            for key in (name, f"variant:{name}") if key in CASES}


UNSOUND = _named("UNSOUND_CASES")  # built past the causality check (they see the future on purpose)
PARITY_ONLY = _named("PARITY_ONLY_CASES")  # a backward that is not the objective's gradient by design


def chars_of(name: str) -> str:
    """The tokenizer alphabet of a case: its module's CHARS, or graph_cases'."""
    return getattr(CASES[name][0], "CHARS", graph_cases.CHARS)


def case(name: str, backend, seed: int = 0):
    """(the case's model, its seq_len)."""
    document, seq_len = case_document(CASES[name][1](), graph_cases.DEFAULT_SEQ_LEN)
    return build(document, seq_len, chars_of(name), backend, seed, sound=name not in UNSOUND), seq_len


def case_seed(name: str) -> int:
    return zlib.crc32(name.encode())  # fixed across runs and machines (hash() of a str is salted)
