"""The server's layered layout of a document (studio/graph_layout.py, issue 49 item 4): columns in the order data
flows, and each column ordered so that wires between neighbouring columns do not cross where an order exists
in which none do."""

from __future__ import annotations

from microgpt.studio.graph_layout import COLUMN, layered


def crossings(body: dict, positions: dict[str, list[int]]) -> int:
    """Pairs of wires between the same two neighbouring columns that cross."""
    spans = [(positions[e["from"].split(".")[0]], positions[e["to"].split(".")[0]]) for e in body["edges"]]
    spans = [(a, b) for a, b in spans if b[0] - a[0] == COLUMN]
    return sum(1 for i, (a1, b1) in enumerate(spans) for a2, b2 in spans[i + 1:]
               if a1[0] == a2[0] and (a1[1] - a2[1]) * (b1[1] - b2[1]) < 0)


def test_columns_follow_the_longest_path_from_the_inputs():
    body = {"nodes": [{"id": n, "op": "relu"} for n in ("c", "a", "b")],
            "edges": [{"from": "a.out", "to": "b.x"}, {"from": "b.out", "to": "c.x"}, {"from": "a.out", "to": "c.x"}]}
    assert {n: xy[0] // COLUMN for n, xy in layered(body).items()} == {"a": 0, "b": 1, "c": 2}


def test_a_column_is_ordered_by_what_reads_it_too():
    # in the document's order the first column is n3, n0, n1: n0 -> n2 then crosses n1 -> n4 whichever way the
    # second column goes; ordering the first column by what reads it (n3 and n1 beside each other) crosses nothing
    body = {"nodes": [{"id": n, "op": "relu"} for n in ("n4", "n3", "n0", "n2", "n1")],
            "edges": [{"from": "n0.out", "to": "n2.x"}, {"from": "n1.out", "to": "n4.x"},
                      {"from": "n3.out", "to": "n4.x"}]}
    assert crossings(body, layered(body)) == 0
