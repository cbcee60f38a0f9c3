"""The node editor's palette (GET /api/graph/palette): every primitive a graph document may name, with its ports
(each with the kinds of value it takes: a port of kind "float" takes stream or logits, and an output of kind
"float" has its input's kind), its params with their defaults ("required" where it has none) and, for a word or a switch, the values it
takes (the editor's menus), and every
library group with its params, ports and body (nodes and edges, so the editor can open one); and the kinds.
"""

from __future__ import annotations

from microgpt.model.graph.library import library_groups
from microgpt.model.graph.ops import OPS
from microgpt.model.graph.ops.base import KINDS, REQUIRED, Op

FLOAT_KINDS = ["stream", "logits"]  # what a port of kind "float" takes (relu, add, ...)
# The kind of each primitive's outputs ("float": the kind its input has); tests hold it to every op's infer.
OUTPUT_KINDS = {"embedding": "stream", "linear": "stream", "logits": "logits", "stream_read": "stream",
                "stream_write": "stream", "layer_norm": "stream", "relu": "float", "gelu": "float", "add": "float",
                "mul": "float", "scale": "float", "concat": "stream", "split": "stream", "narrow": "stream",
                "rope": "stream", "attention": "stream", "prefix_mean": "stream", "shift": "stream", "zeros": "stream",
                "prior": "stream", "router": "weights", "mix": "logits"}


def _port(name: str, kind: str, many: bool | None = None) -> dict:
    entry = {"name": name, "type": kind, "kinds": FLOAT_KINDS if kind == "float" else [kind]}
    return entry if many is None else {**entry, "many": many}


def _op_entry(op: Op) -> dict:
    entry = {"name": op.name, "doc": op.doc,
             "inputs": [_port(name, port.kind, port.many) for name, port in op.inputs.items()],
             "outputs": [_port(name, OUTPUT_KINDS[op.name]) for name in op.outputs],
             "params": [{"name": name, "default": None if default is REQUIRED else default,
                         "required": default is REQUIRED, **_choices(op, name, default)}
                        for name, default in op.params.items()]}
    if type(op).output_ports is not Op.output_ports:  # split: out0, out1, ... one per entry of its widths
        entry["outputs"] = [_port("out0", "stream"), _port("out1", "stream")]
        entry["outputs_from"] = "widths"
    return entry


def _choices(op: Op, name: str, default: object) -> dict:
    """{"choices": [...]} for a param that takes one of a list of words (or a switch), else {}."""
    if name in op.choices:
        return {"choices": list(op.choices[name])}
    return {"choices": [True, False]} if isinstance(default, bool) else {}


def _port_kind(text: str) -> str:
    return text.partition("[")[0]


def palette() -> dict:
    """Every primitive and library group as the editor offers them (see the module doc)."""
    groups = [{"name": name, "description": group.get("description", ""), "params": group.get("params", {}),
               "inputs": [{"name": port, "type": kind, "kinds": [_port_kind(kind)]}
                          for port, kind in group.get("inputs", {}).items()],
               "outputs": [{"name": port, "type": kind, "kinds": [_port_kind(kind)]}
                           for port, kind in group.get("outputs", {}).items()],
               "nodes": group.get("nodes", []), "edges": group.get("edges", []), "source": "library"}
              for name, group in library_groups().items()]
    return {"ops": [_op_entry(op) for op in OPS.values()], "groups": groups, "types": list(KINDS)}
