"""The paths of a graph's values: each node's output by the node's path joined with dots
(`blocks.1.attn.heads`; `name.out0` for each output of a node with several), and `path[i]` for head i's columns
of an attention node. A path that is not there is one line naming the nearest ones.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from microgpt.core.errors import ConfigError

ATTENTION_OPS = ("attention", "rope_attention")
HEAD = re.compile(r"^(?P<path>.+)\[(?P<head>-?\d+)\]$")


@dataclass(frozen=True)
class Place:
    """Where a path's value is made: the node's index in the program, its output port and value id, and the
    columns of one head (None: every column)."""

    path: str
    node: int
    port: str
    value: int
    columns: tuple[int, int] | None = None


def node_paths(program) -> dict[str, tuple[int, str]]:
    """Every output's path -> (node index, port), in forward order."""
    found = {}
    for i, node in enumerate(program.nodes):
        for port in node.outputs:
            found[node.name if len(node.outputs) == 1 else f"{node.name}.{port}"] = (i, port)
    return found


def path_widths(program) -> dict[str, int]:
    """Every output's path -> its width (the vocabulary for logits), in forward order."""
    return {path: program.values[program.nodes[i].outputs[port]].width for path, (i, port) in node_paths(program).items()}


def head_columns(kernel) -> list[tuple[int, int]]:
    """(first column, width) of each head of an attention node's kernel, in order."""
    return [(group.col + h * group.width, group.width) for group in kernel.groups for h in range(group.count)]


def attention_paths(program) -> list[str]:
    """The attention nodes' paths, in forward order: `attention(layer, head)`'s layers."""
    return [node.name for node in program.nodes if node.op.name in ATTENTION_OPS]


def resolve(graph, path: str) -> Place:
    """The Place of `path` in a graph model; a ConfigError naming the nearest paths where it is not one."""
    if not isinstance(path, str):
        raise ConfigError(f"a path is a string such as 'blocks.0.attn.heads' or 'blocks.0.attn.heads[2]', got "
                          f"{path!r}")
    known = node_paths(graph.program)
    head = HEAD.match(path)
    name = head.group("path") if head else path
    if name not in known:
        near = difflib.get_close_matches(name, list(known), n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(near)}?" if near else f"the paths start {', '.join(list(known)[:3])}, ..."
        raise ConfigError(f"no node has the path {path!r}; {hint} (`microgpt inspect MODEL` lists them all)")
    index, port = known[name]
    node = graph.program.nodes[index]
    if head is None:
        return Place(path, index, port, node.outputs[port])
    if node.op.name not in ATTENTION_OPS:
        raise ConfigError(f"{path}: [i] picks a head of an attention node, and {name} is a {node.op.name}; name an "
                          f"attention node ({', '.join(attention_paths(graph.program)[:3])}, ...)")
    heads = head_columns(graph.passes.kernels[index])
    i = int(head.group("head"))
    if not 0 <= i < len(heads):
        raise ConfigError(f"{path}: {name} has heads 0 .. {len(heads) - 1}; pick one of them")
    first, width = heads[i]
    return Place(path, index, port, node.outputs[port], (first, first + width))
