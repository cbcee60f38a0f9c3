"""The compiler's rewrites of known subgraphs to the backend's fused ops, on primitives in forward order:
a linear with bias whose only reader is a relu becomes `linear_relu` (the backend's fused bias + ReLU), and
rope nodes read only by an attention's queries and keys, with the attention's heads, fold into it
(`rope_attention`: gpt's own arithmetic, without merging and splitting the heads twice). LayerNorm and the
loss are fused ops already, one primitive each.
"""

from __future__ import annotations

from microgpt.model.graph.ops import ALL
from microgpt.model.graph.ops.base import Node


def fuse(nodes: list[Node]) -> list[Node]:
    """The rewrites to fused ops (the module's step 5), on nodes in forward order."""
    readers: dict[int, list[tuple[Node, str]]] = {}
    for node in nodes:
        for port, vids in node.inputs.items():
            for vid in vids:
                readers.setdefault(vid, []).append((node, port))
    producer = {vid: node for node in nodes for vid in node.outputs.values()}
    dropped: set[int] = set()
    for node in nodes:
        if node.op.name == "linear" and node.params["bias"]:
            only = readers.get(node.outputs["out"], [])
            if len(only) == 1 and only[0][0].op.name == "relu":
                relu = only[0][0]
                node.op, node.outputs, node.types = ALL["linear_relu"], relu.outputs, relu.types
                dropped.add(id(relu))
        if node.op.name == "attention":
            ropes = []
            for port in ("q", "k"):
                source = producer.get(node.inputs[port][0])
                if (source is None or source.op.name != "rope" or len(readers[node.inputs[port][0]]) != 1
                        or source.params["heads"] != node.params["heads"]):
                    break
                ropes.append((port, source))
            else:
                for port, rope in ropes:
                    node.inputs[port] = rope.inputs["x"]
                    dropped.add(id(rope))
                node.op = ALL["rope_attention"]
    return [node for node in nodes if id(node) not in dropped]
