"""The studio's bounds stated once (issue 52 items 4 and 6): a layout places at most as many nodes as a graph may
flatten to primitives (graph_save.MAX_LAYOUT_ENTRIES was 200,000, the primitives' old limit, against today's
20,000), and the layout file read back is held to the bytes such a layout needs."""

from __future__ import annotations

import json

import pytest

from extras import need

need("starlette")

from microgpt.model.graph.compile import MAX_NODES
from microgpt.studio.graph_save import MAX_LAYOUT_BYTES, MAX_LAYOUT_ENTRIES, _layout_file, check_layout
from microgpt.studio.workspace import Workspace


def positions(count: int) -> dict:
    return {"positions": {f"/n{i}": [i, 0] for i in range(count)}}


def test_a_layout_places_at_most_as_many_nodes_as_a_graph_has_primitives():
    assert MAX_LAYOUT_ENTRIES == MAX_NODES
    assert len(check_layout(positions(MAX_NODES))["positions"]) == MAX_NODES
    with pytest.raises(ValueError, match=f"more than {MAX_NODES:,} entries; a graph has at most {MAX_NODES:,}"):
        check_layout(positions(MAX_NODES + 1))  # it was taken, up to 200,000
    with pytest.raises(ValueError, match=f"more than {MAX_NODES:,} entries"):
        check_layout({"collapsed": [f"/g{i}" for i in range(MAX_NODES + 1)]})


def test_a_layout_file_is_read_back_only_within_its_bytes(tmp_path):
    layouts = tmp_path / "studio" / "layout"
    layouts.mkdir(parents=True)
    (layouts / "fits.json").write_text(json.dumps(positions(MAX_NODES)), encoding="utf-8")
    assert (layouts / "fits.json").stat().st_size <= MAX_LAYOUT_BYTES
    workspace = Workspace(tmp_path)
    assert len(_layout_file(workspace, "fits")["positions"]) == MAX_NODES
    (layouts / "big.json").write_bytes(b" " * MAX_LAYOUT_BYTES + b"{}")  # valid JSON, past the bytes: not read
    assert _layout_file(workspace, "big") is None
    assert _layout_file(workspace, "missing") is None
