"""What each node of a graph document costs, for the node editor: its parameters, the memory its step keeps,
and its share of a training step's floating-point operations.

A node is keyed as the editor keys it, "BODY/NODE": BODY is "" for the document's top level, else the group
whose body holds the node. A group instance's costs are those of every primitive inside it; a node of a
group's body sums its costs over every instance of that group (`instances` says how many). The compiler's
Trace (model/graph/compile.py) maps each flattened node path to its key.

The operations are an estimate, as speed.py's tokens/s is: a node with weights does 6 per weight per position
in forward and backward (a matrix product's multiply-adds, twice more for the two gradients), except a table
it only looks up (an embedding's, a prior's); an attention adds 12 x T x its width per position (q k^T and the
weighted sum of v, each 2 x T x width forward and twice that backward); and every op touches its inputs and
outputs about ELEMENT_FLOPS times per element.
"""

from __future__ import annotations

from microgpt.model.graph.compile import Trace
from microgpt.model.graph.memory import node_activations
from microgpt.model.graph.program import Program

FLOPS_PER_WEIGHT = 6  # per position: forward 2, backward 4
ATTENTION_FLOPS = 12  # per position, key and column: q k^T and p v, 2 each forward, 4 each backward
ELEMENT_FLOPS = 4  # per element of every input and output, forward and backward: a rough count of the rest
LOOKUPS = {"embedding", "prior"}  # their tables are read a row at a time, not multiplied


def node_flops(program: Program, node, parameters: int, widths: dict[int, int]) -> int:
    """Floating-point operations of one primitive per sequence of T positions (see the module doc); `widths`:
    each value's width (0 for token ids)."""
    T = program.dims["T"]
    flops = ELEMENT_FLOPS * T * (sum(map(widths.__getitem__, node.input_ids()))
                                 + sum(map(widths.__getitem__, node.outputs.values())))
    if node.op.name not in LOOKUPS:
        flops += FLOPS_PER_WEIGHT * T * parameters
    if node.op.name in ("attention", "rope_attention"):
        flops += ATTENTION_FLOPS * T * T * widths[node.inputs["q"][0]]
    return flops


def _parameters_by_node(program: Program) -> dict[str, int]:
    """Each primitive's parameters by its name (its path joined by dots): a parameter is named the node's name,
    or the node's name, a dot and the weight's (`blocks.0.attn.wq.w`); the longest such name owns it."""
    names = {node.name for node in program.nodes}
    owned: dict[str, int] = {}
    for spec in program.specs:
        name = spec.name
        while name not in names and "." in name:
            name = name.rpartition(".")[0]
        owned[name] = owned.get(name, 0) + spec.size
    return owned


def node_costs(program: Program, trace: Trace, batch: int, backend) -> dict[str, dict]:
    """{"BODY/NODE": {"parameters", "memory_bytes", "share", "instances"}} for every node of the document that
    holds primitives (memory_bytes: what the node keeps from forward to backward at this batch, the step's
    activations; share: of the step's operations, 0 to 1)."""
    memory = node_activations(program, batch, backend)
    costs: dict[str, dict] = {}
    paths: dict[str, set] = {}
    for path, key in trace.nodes.items():
        paths.setdefault(key, set()).add(path)
    owned = _parameters_by_node(program)
    widths = {vid: kind.width or 0 for vid, kind in program.values.items()}
    total = 0  # whole numbers throughout: a document may bind sizes no float holds
    for node, kept in zip(program.nodes, memory):
        parameters = owned.get(node.name, 0)
        flops = node_flops(program, node, parameters, widths)
        total += flops
        for cut in range(1, len(node.path) + 1):
            key = trace.nodes.get(node.path[:cut])
            if key is None:  # a repeated group's copy number
                continue
            entry = costs.setdefault(key, {"parameters": 0, "memory_bytes": 0, "flops": 0,
                                           "instances": len(paths[key])})
            entry["parameters"] += parameters
            entry["memory_bytes"] += kept
            entry["flops"] += flops
    for entry in costs.values():
        entry["share"] = entry.pop("flops") / total if total else 0.0
    return costs
