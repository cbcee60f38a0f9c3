"""Where the node editor draws a document's nodes: a layered layout for any document, and the families' own.

A layout is {"version": 1, "positions": {"BODY/NODE": [x, y]}, "collapsed": []}: BODY is "" for the top level,
else the group whose body holds the node (every group the document uses, the library's too, so the editor can
open one). It never enters the document (docs/graphs.md); the studio keeps it in studio/layout/NAME.json.

- `layered(body)`: the graph flows down. A node's row is one below the lowest row of the nodes it reads (its
  longest path from the body's inputs); a row's nodes are ordered by the mean column of what they read (fewer
  crossings), then by the document's order, and centred on x = 0. An edge that closes a cycle (a draft can
  have one) is left out of the rows.
- the ensemble's top level: the stream as a bus row (the prior's narrow, then each stream add), the experts
  side by side in the row below it, each between the stream it reads and the add it writes, their logits
  fanning down into the mix, the router beside the mix, the loss under it;
- lookahead's top level: the trunk in a column (embedding, blocks, final LayerNorm, head, loss), its heads side
  by side to the right of the final LayerNorm, level with it.
A node that a family's rule does not place (a document edited since) goes where the layered layout puts it,
below the rest.
"""

from __future__ import annotations

import re

from microgpt.model.graph.library import with_library

VERSION = 1
COLUMN = 240  # px between node centres in a row: a node is drawn about 180 wide
ROW = 180  # px between rows: the editor draws a group's node up to about 140 high (its ports, summary and
# buttons), and its wires need the rest; an ensemble's experts sit half a column from the adds above them


def _node(end: str) -> str | None:
    node, dot, _ = end.partition(".")
    return node if dot else None


def layered(body: dict) -> dict[str, list[int]]:
    """{node id: [x, y]} for one body (see the module doc)."""
    ids = [node["id"] for node in body.get("nodes", []) if isinstance(node, dict) and isinstance(node.get("id"), str)]
    known = set(ids)
    reads: dict[str, list[str]] = {node_id: [] for node_id in ids}
    for edge in body.get("edges", []):
        if not isinstance(edge, dict):
            continue
        source, target = _node(str(edge.get("from", ""))), _node(str(edge.get("to", "")))
        if source in known and target in known and source != target and source not in reads[target]:
            reads[target].append(source)
    row: dict[str, int] = {}
    state: dict[str, str] = {}  # "open" while its sources are being placed (a cycle's edge back is skipped)

    def place(node_id: str) -> int:
        stack = [node_id]
        while stack:
            current = stack[-1]
            if state.get(current) is None:
                state[current] = "open"
                stack.extend(s for s in reads[current] if state.get(s) is None)
                continue
            stack.pop()
            if state[current] == "open":
                state[current] = "done"
                row[current] = 1 + max((row[s] for s in reads[current] if s in row), default=-1)
        return row[node_id]

    for node_id in ids:
        place(node_id)
    rows: dict[int, list[str]] = {}
    for node_id in ids:
        rows.setdefault(row[node_id], []).append(node_id)
    column: dict[str, float] = {}
    positions: dict[str, list[int]] = {}
    for y in sorted(rows):
        order = {node_id: i for i, node_id in enumerate(rows[y])}
        placed = sorted(rows[y], key=lambda n: (_mean([column[s] for s in reads[n] if s in column], order[n]),
                                                order[n]))
        for i, node_id in enumerate(placed):
            column[node_id] = i - (len(placed) - 1) / 2
            positions[node_id] = [round(column[node_id] * COLUMN), y * ROW]
    return positions


def _mean(values: list[float], otherwise: float) -> float:
    return sum(values) / len(values) if values else otherwise


def _ensemble(document: dict) -> dict[str, list[int]]:
    ids = {node["id"] for node in document.get("nodes", [])}
    experts = sorted(int(m.group(1)) for i in ids if (m := re.fullmatch(r"expert(\d+)", i)))
    n = len(experts)
    at = {"prior": [0, 0], "empty": [0, ROW], "prior_narrow": [0, ROW]}
    for i in experts:
        at[f"stream{i}"] = [i * COLUMN, ROW]  # the bus row: each add where expert i writes
        at[f"expert{i}"] = [round((i - 0.5) * COLUMN), 2 * ROW]  # between the stream it reads and its add
    middle = round((n / 2) * COLUMN)
    at.update(mix=[middle, 3 * ROW], router=[middle + COLUMN, 3 * ROW], loss=[middle, 4 * ROW])
    return at


def _lookahead(document: dict) -> dict[str, list[int]]:
    at = {node_id: [0, i * ROW] for i, node_id in enumerate(("tok_emb", "blocks", "final_norm", "head", "loss"))}
    heads = sorted(int(m.group(1)) for node in document.get("nodes", [])
                   if (m := re.fullmatch(r"head(\d+)", node["id"])))
    at.update({f"head{k}": [k * COLUMN, 2 * ROW] for k in heads})
    return at


FAMILY_LAYOUTS = {"ensemble": _ensemble, "lookahead": _lookahead}  # others: layered (gpt's is a column)


def _top(document: dict, family_name: str | None) -> dict[str, list[int]]:
    auto = layered(document)
    rule = FAMILY_LAYOUTS.get(family_name)
    if rule is None:
        return auto
    chosen = {node_id: xy for node_id, xy in rule(document).items() if node_id in auto}
    below = max((y for _, y in chosen.values()), default=-ROW) + ROW
    return {node_id: chosen.get(node_id) or [x, y + below] for node_id, (x, y) in auto.items()}


def layout_of(document: dict, family_name: str | None = None) -> dict:
    """The layout of a document (a family's when `family_name` names one with its own rule): every node of its
    top level and of every group's body it uses, keyed "BODY/NODE"."""
    positions = {f"/{node_id}": xy for node_id, xy in _top(document, family_name).items()}
    for name, group in with_library(document).get("groups", {}).items():
        positions.update({f"{name}/{node_id}": xy for node_id, xy in layered(group).items()})
    return {"version": VERSION, "positions": positions, "collapsed": []}
