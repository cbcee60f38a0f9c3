"""The graph equal to a family's model: `document_for(family name, config)`, one module per family here.

Each is written with the library groups (model/graph/library), node ids chosen so that every parameter has
the family's name where it can (gpt's exactly) and the family's order always, so that the same seed draws
the same initial weights; tests/graph/test_graph_equivalence.py trains both side by side.
"""

from __future__ import annotations

import importlib

from microgpt.core.errors import ConfigError

WRITERS = {"gpt": "microgpt.model.graph.from_family.gpt",  # family -> the module whose document(config) writes it
           "ensemble": "microgpt.model.graph.from_family.ensemble",
           "lookahead": "microgpt.model.graph.from_family.lookahead"}


def document_for(family_name: str, config) -> dict:
    """The graph document of a family's model with this config."""
    if family_name not in WRITERS:
        raise ConfigError(f"from-family writes the graph of {', '.join(WRITERS)}; {family_name!r} is "
                          + ("a graph already" if family_name == "graph" else "not one of them"))
    return importlib.import_module(WRITERS[family_name]).document(config)
