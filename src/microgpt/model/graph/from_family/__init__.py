"""The graph equal to a family's model: `document_for(family name, config)`, one module per family here.

Each is written with the library groups (model/graph/library), node ids chosen so that every parameter has
the family's name where it can (gpt's exactly) and the family's order always, so that the same seed draws
the same initial weights; tests/graph/test_graph_equivalence.py trains both side by side. `graph_weights` puts
a trained family model's weights under its graph's names (each writer's `graph_name`), so that the graph runs
that model (use/inspect traces every family this way).
"""

from __future__ import annotations

import importlib

import numpy as np

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


def graph_weights(family_name: str, weights: dict) -> dict:
    """A family model's weights (name -> host array, in the family's order) under its graph's names; the family's
    parameters that the graph holds as one (lookahead hydra's token<j>.w) stacked by rows in the family's order."""
    rename = importlib.import_module(WRITERS[family_name]).graph_name
    parts: dict[str, list] = {}
    for name, value in weights.items():
        parts.setdefault(rename(name), []).append(value)
    return {name: arrays[0] if len(arrays) == 1 else np.concatenate(arrays) for name, arrays in parts.items()}
