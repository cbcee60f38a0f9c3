"""What `microgpt graph show` and `microgpt graph ops` print: a compiled graph's group tree, and the primitives.

The tree has the group instances (compile.py's Program.instances) and the primitives as they run, after the
compiler's fusions (a linear with its relu is one `linear_relu`; rope nodes read only by an attention fold
into a `rope_attention`), each under the instance it sits in, in forward order. `ops_table()` is the
markdown table of the primitives in docs/graphs.md: `python -m microgpt.cli.graph_show` prints it, `--write
docs/graphs.md` puts it in place, and tests/graph/test_graph_examples.py fails when the copy drifts.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

BEGIN = "<!-- graph ops: made by `python -m microgpt.cli.graph_show`; a test checks this table -->"
END = "<!-- end of graph ops -->"
INDENT = "  "


def _count(specs, prefix: str) -> int:
    """The parameters whose names are `prefix` or start with `prefix` and a dot."""
    return sum(spec.size for spec in specs if spec.name == prefix or spec.name.startswith(prefix + "."))


def print_tree(config, source) -> None:
    program = config.program
    specs = program.specs
    print(f"{source}: {sum(spec.size for spec in specs):,} parameters, {len(program.nodes)} primitives as they run "
          f"(after fusion), dims {', '.join(f'{k} {v}' for k, v in program.dims.items())}")
    entries = []  # (path, depth, line) of every instance and primitive
    for instance in program.instances:
        ports = ", ".join(f"{port}: {kind}" for port, kind in instance.ports.items()) or "no inputs"
        count = _count(specs, ".".join(instance.path))
        entries.append((instance.path, f"{'/'.join(instance.path)}  group {instance.group}  ({ports})  {count:,} parameters"))
    for node in program.nodes:
        outputs = ", ".join(f"{port}: {kind}" for port, kind in node.types.items())
        if node.op.name == "cross_entropy":
            outputs = f"a loss, offset {node.params['offset']}, weight {node.params['weight']}"
        own = _count(specs, node.name)
        entries.append((node.path, f"{node.path[-1]}  {node.op.name} -> {outputs}"
                        + (f"  {own:,} parameters" if own else "")))
    first = {}  # path -> the forward position of its first primitive, which orders the tree
    for position, node in enumerate(program.nodes):
        for cut in range(1, len(node.path) + 1):
            first.setdefault(node.path[:cut], position)
    instances = {instance.path for instance in program.instances}
    for path, line in sorted(entries, key=lambda entry: _order(entry[0], first)):
        depth = sum(1 for cut in range(1, len(path)) if path[:cut] in instances)
        print(INDENT * (depth + 1) + line)


def _order(path: tuple, first: dict) -> tuple:
    """A sort key placing each entry after its enclosing instance and among its siblings by first primitive."""
    return tuple(first.get(path[:cut], len(first) + 1) for cut in range(1, len(path) + 1))


def _params(op) -> str:
    from microgpt.model.graph.ops.base import REQUIRED

    shown = []
    for name, default in op.params.items():
        if default is REQUIRED:
            shown.append(f"{name} (required)")
        else:
            shown.append(f"{name}={default if isinstance(default, str) else json.dumps(default)}")
    return ", ".join(shown) or "none"


def _inputs(op) -> str:
    kinds = {"float": "stream or logits"}
    return ", ".join(f"{port}: {kinds.get(p.kind, p.kind)}{' (any number)' if p.many else ''}"
                     for port, p in op.inputs.items()) or "none"


def _outputs(op) -> str:
    from microgpt.model.graph.ops.base import Op

    if type(op).output_ports is not Op.output_ports:
        return "out0, out1, ... (one per width)"
    return ", ".join(op.outputs) or "none (a loss: it adds to the objective)"


def print_ops() -> None:
    from microgpt.model.graph.ops import OPS

    for op in OPS.values():
        print(f"{op.name}({_inputs(op)}) -> {_outputs(op)}")
        print(f"{INDENT}params: {_params(op)}")
        print(f"{INDENT}{op.doc}")


def ops_table() -> str:
    from microgpt.model.graph.ops import OPS

    rows = ["| op | inputs | outputs | params (default) | what it computes |", "| --- | --- | --- | --- | --- |"]
    for op in OPS.values():
        cells = (f"`{op.name}`", _inputs(op), _outputs(op), _params(op), op.doc)
        rows.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(rows)


def docs_block() -> str:
    return f"{BEGIN}\n{ops_table()}\n{END}"


def write_into(doc: Path) -> None:
    """Replace the table between the markers of `doc` with the current one."""
    text = doc.read_text(encoding="utf-8")
    start, end = text.index(BEGIN), text.index(END) + len(END)
    doc.write_text(text[:start] + docs_block() + text[end:], encoding="utf-8")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--write":
        write_into(Path(sys.argv[2]))
    else:
        print(docs_block())
