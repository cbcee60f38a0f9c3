"""Where the node editor draws a document's nodes: a layered layout for any document, and the families' own.

A layout is {"version": 1, "positions": {"BODY/NODE": [x, y]}, "collapsed": []}: BODY is "" for the top level,
else the group whose body holds the node (every group the document uses, the library's too, so the editor can
open one). It never enters the document (docs/graphs.md); the studio keeps it in studio/layout/NAME.json.

- `layered(body)`: the graph flows left to right, as a node's ports do (inputs on its left, outputs on its
  right). A node's column is one right of the rightmost column of the nodes it reads (its longest path from
  the body's inputs); a column's nodes start in the document's order and are then sorted by the mean row of
  what they read, then of what reads them, and so on for SWEEPS passes (the barycentre heuristic: fewer wires
  cross), and are centred on y = 0. An edge that closes a cycle (a draft can have one) is left out of the
  columns. The gaps are wide enough for the editor to route wires between the boxes and label them.
- the ensemble's top level: the stream as a bus along the top (the prior, its narrow, then each stream add),
  the experts side by side in the row below it, each between the stream it reads and the add it writes, their
  logits fanning down into the mix below and right of them, the router on the bus after the last add, the
  loss after the mix;
- lookahead's top level: the trunk in a row (embedding, blocks, final LayerNorm, head, loss), its heads side
  by side in the row below, from under the final LayerNorm on, each reading the blocks' states.
A node that a family's rule does not place (a document edited since) goes where the layered layout puts it,
below the rest.
"""

from __future__ import annotations

import re

from microgpt.model.graph.library import with_library

VERSION = 1
COLUMN = 320  # px between node centres in a row: a node is drawn 190 wide, and the gap holds a wire's shape label
ROW = 220  # px between rows: the editor draws a group's node up to about 180 high (its ports, a summary of up
# to three lines and buttons), and its wires need the rest; an ensemble's experts sit half a column from the
# adds above them
SWEEPS = 4  # passes of the ordering of each column, alternately by what a node reads and by what reads it


def _node(end: str) -> str | None:
    node, dot, _ = end.partition(".")
    return node if dot else None


def layered(body: dict) -> dict[str, list[int]]:
    """{node id: [x, y]} for one body (see the module doc)."""
    ids = [node["id"] for node in body.get("nodes", []) if isinstance(node, dict) and isinstance(node.get("id"), str)]
    known = set(ids)
    reads: dict[str, dict[str, None]] = {node_id: {} for node_id in ids}  # each node's sources, in order, once
    for edge in body.get("edges", []):
        if not isinstance(edge, dict):
            continue
        source, target = _node(str(edge.get("from", ""))), _node(str(edge.get("to", "")))
        if source in known and target in known and source != target:
            reads[target][source] = None
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
    readers: dict[str, list[str]] = {node_id: [] for node_id in ids}
    for node_id in ids:
        for source in reads[node_id]:
            readers[source].append(node_id)
    lane = {node_id: i - (len(column) - 1) / 2 for column in rows.values() for i, node_id in enumerate(column)}
    for sweep in range(SWEEPS):
        forward = sweep % 2 == 0
        for x in sorted(rows, reverse=not forward):
            neighbours = reads if forward else readers
            rows[x].sort(key=lambda n: _mean([lane[m] for m in neighbours[n]], lane[n]))
            lane.update({node_id: i - (len(rows[x]) - 1) / 2 for i, node_id in enumerate(rows[x])})
    return {node_id: [row[node_id] * COLUMN, round(lane[node_id] * ROW)] for node_id in ids}


def _mean(values: list[float], otherwise: float) -> float:
    return sum(values) / len(values) if values else otherwise


def _ensemble(document: dict) -> dict[str, list[int]]:
    ids = {node["id"] for node in document.get("nodes", [])}
    experts = sorted(int(m.group(1)) for i in ids if (m := re.fullmatch(r"expert(\d+)", i)))
    n = len(experts)
    at = {"prior": [0, 0], "empty": [COLUMN, 0], "prior_narrow": [COLUMN, 0]}
    for i in experts:
        at[f"expert{i}"] = [2 * i * COLUMN, ROW]  # below the bus, between the stream it reads and its add
        at[f"stream{i}"] = [(2 * i + 1) * COLUMN, 0]  # the bus: each add where expert i writes
    at.update(router=[(2 * n + 2) * COLUMN, 0], mix=[(2 * n + 3) * COLUMN, 2 * ROW],
              loss=[(2 * n + 4) * COLUMN, 2 * ROW])
    return at


def _lookahead(document: dict) -> dict[str, list[int]]:
    at = {node_id: [i * COLUMN, 0] for i, node_id in enumerate(("tok_emb", "blocks", "final_norm", "head", "loss"))}
    heads = sorted(int(m.group(1)) for node in document.get("nodes", [])
                   if (m := re.fullmatch(r"head(\d+)", node["id"])))
    at.update({f"head{k}": [(1 + k) * COLUMN, ROW] for k in heads})  # the row below, from under final_norm
    return at


FAMILY_LAYOUTS = {"ensemble": _ensemble, "lookahead": _lookahead}  # others: layered (gpt's is a column)


def _top(document: dict, family_name: str | None) -> dict[str, list[int]]:
    auto = layered(document)
    rule = FAMILY_LAYOUTS.get(family_name)
    if rule is None:
        return auto
    chosen = {node_id: xy for node_id, xy in rule(document).items() if node_id in auto}
    below = max((y for _, y in chosen.values()), default=-ROW) + ROW - min(y for _, y in auto.values())
    return {node_id: chosen.get(node_id) or [x, y + below] for node_id, (x, y) in auto.items()}


def layout_of(document: dict, family_name: str | None = None) -> dict:
    """The layout of a document (a family's when `family_name` names one with its own rule): every node of its
    top level and of every group's body it uses, keyed "BODY/NODE"."""
    positions = {f"/{node_id}": xy for node_id, xy in _top(document, family_name).items()}
    for name, group in with_library(document).get("groups", {}).items():
        positions.update({f"{name}/{node_id}": xy for node_id, xy in layered(group).items()})
    return {"version": VERSION, "positions": positions, "collapsed": []}
