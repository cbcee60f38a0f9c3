"""The workspace's library of blocks on the server (issue 49 item 1): a group of a document saved by name as
blocks/NAME.yaml with the document's groups it uses, listed for the palette, never replaced without a
confirmation; hostile names and files (a path out, a symlink, a file too large, a malformed one, a FIFO) are
refused or listed as damaged, never read into a graph and never a crash."""

from __future__ import annotations

import os

import pytest

from extras import need

need("starlette")
need("httpx")

from microgpt.model.graph.document import read_document
from microgpt.studio.graph_blocks import MAX_BLOCK_BYTES
from studio_graphs import SETTINGS, check, small_gpt


def with_groups() -> dict:
    """small_gpt whose blocks are the document's own `inner` (a layer_norm) used by `outer` (inner, then an
    add of its input), with an unused group `spare` between them."""
    document = small_gpt()
    document["groups"] = {
        "inner": {"inputs": {"x": "stream[d]"}, "outputs": {"y": "stream[d]"},
                  "nodes": [{"id": "ln", "op": "layer_norm"}], "edges": [{"from": "x", "to": "ln.x"},
                                                                         {"from": "ln.out", "to": "y"}]},
        "spare": {"inputs": {"x": "stream[d]"}, "outputs": {"x": "stream[d]"}, "nodes": [], "edges": [
            {"from": "x", "to": "x"}]},
        "outer": {"inputs": {"h": "stream[d]"}, "outputs": {"h": "stream[d]"},
                  "nodes": [{"id": "part", "group": "inner"}, {"id": "res", "op": "add"}],
                  "edges": [{"from": "h", "to": "part.x"}, {"from": "h", "to": "res.in"},
                            {"from": "part.y", "to": "res.in"}, {"from": "res.out", "to": "h"}]}}
    document["nodes"][1] = {"id": "blocks", "group": "outer", "repeat": 3}
    document["edges"] = [{"from": "tok_emb.out", "to": "blocks.h"} if e["to"] == "blocks.x" else
                         {"from": "blocks.h", "to": "final_norm.x"} if e["from"] == "blocks.x" else e
                         for e in document["edges"]]
    return document


def save(client, name, group="outer", document=None, **extra):
    return client.post("/api/blocks", json={"name": name, "group": group,
                                            "document": document or with_groups(), **extra})


def test_a_group_is_saved_with_the_groups_it_uses_and_listed(client, workspace):
    assert client.get("/api/blocks").json() == {"blocks": [], "damaged": []}
    answer = save(client, "res_block")
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"saved": "res_block", "file": "blocks/res_block.yaml"}
    saved = read_document(workspace / "blocks" / "res_block.yaml")  # a graph document, as the library's files
    assert list(saved["groups"]) == ["inner", "res_block"] and saved.get("nodes", []) == []
    assert saved["groups"]["res_block"] == with_groups()["groups"]["outer"]
    (block,) = client.get("/api/blocks").json()["blocks"]
    assert block["name"] == "res_block" and list(block["groups"]) == ["inner", "res_block"]
    # carried into another graph as the page carries it, it checks clean there
    other = small_gpt()
    other["groups"] = block["groups"]
    other["nodes"][1] = {"id": "mine", "group": "res_block", "repeat": 2}
    other["edges"] = [{"from": "tok_emb.out", "to": "mine.h"} if e["to"] == "blocks.x" else
                      {"from": "mine.h", "to": "final_norm.x"} if e["from"] == "blocks.x" else e
                      for e in other["edges"]]
    assert check(client, other, SETTINGS)["errors"] == []


def test_a_taken_name_asks_before_it_is_replaced(client, workspace):
    assert save(client, "res_block").status_code == 200
    assert save(client, "res_block").status_code == 200  # the same definition again replaces nothing
    changed = with_groups()
    changed["groups"]["outer"]["description"] = "another"
    refused = save(client, "res_block", document=changed)
    assert refused.status_code == 409
    assert refused.json()["exists"] is True and refused.json()["suggested"] == "res_block_2"
    assert "description" not in read_document(workspace / "blocks" / "res_block.yaml")["groups"]["res_block"]
    assert save(client, "res_block", document=changed, overwrite=True).status_code == 200
    assert read_document(workspace / "blocks" / "res_block.yaml")["groups"]["res_block"]["description"] == "another"


@pytest.mark.parametrize("name", ["../out", "a/b", "9lives", "", "x" * 65, "attention", None, ["a"], "na\0me",
                                  ".hidden", "a.yaml"])
def test_a_name_that_is_no_block_name_is_refused(client, workspace, name):
    answer = save(client, name)
    assert answer.status_code == 400 and "\n" not in answer.json()["error"], answer.text
    assert not (workspace / "blocks").exists()


def test_what_is_no_group_of_the_document_is_refused(client, workspace):
    for group, words in (("transformer_block", "library group"), ("nothing", "not in it"), (None, "not in it")):
        answer = save(client, "mine", group=group)
        assert answer.status_code == 400 and words in answer.json()["error"], answer.text
    assert save(client, "x", document={"nodes": "no"}).status_code == 400
    assert save(client, "inner", group="outer").status_code == 400  # the block uses a group of its own name
    assert not (workspace / "blocks").exists()


def test_the_blocks_folder_or_file_linked_out_of_the_workspace_is_refused(client, workspace, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (workspace / "blocks").symlink_to(outside)
    assert client.get("/api/blocks").status_code == 403
    assert save(client, "res_block").status_code == 403
    assert list(outside.iterdir()) == []
    (workspace / "blocks").unlink()
    (workspace / "blocks").mkdir()
    (outside / "res_block.yaml").write_text("precious\n", encoding="utf-8")
    (workspace / "blocks" / "res_block.yaml").symlink_to(outside / "res_block.yaml")
    assert save(client, "res_block", overwrite=True).status_code == 403  # never written through the link
    assert (outside / "res_block.yaml").read_text(encoding="utf-8") == "precious\n"
    (damaged,) = client.get("/api/blocks").json()["damaged"]
    assert damaged["file"] == "blocks/res_block.yaml" and "symlink" in damaged["error"]


def test_files_that_are_no_block_are_listed_as_damaged(client, workspace):
    assert save(client, "good").status_code == 200
    folder = workspace / "blocks"
    (folder / "broken.yaml").write_text("microgpt_graph: 1\ngroups: {a: [unclosed\n", encoding="utf-8")
    (folder / "huge.yaml").write_bytes(b"#" * (MAX_BLOCK_BYTES + 1))
    (folder / "other.yaml").write_text("microgpt_graph: 1\ngroups: {b: {nodes: [], edges: []}}\n", encoding="utf-8")
    (folder / "9bad.yaml").write_text("microgpt_graph: 1\n", encoding="utf-8")
    (folder / "latin.yaml").write_bytes(b"\xff\xfe")
    (folder / "dir.yaml").mkdir()
    os.mkfifo(folder / "pipe.yaml")
    (folder / "notes.txt").write_text("not a block", encoding="utf-8")
    listed = client.get("/api/blocks").json()
    assert [block["name"] for block in listed["blocks"]] == ["good"]
    reasons = {entry["file"]: entry["error"] for entry in listed["damaged"]}
    assert set(reasons) == {f"blocks/{name}.yaml" for name in ("broken", "huge", "other", "9bad", "latin", "dir",
                                                               "pipe")}
    assert "neither JSON nor YAML" in reasons["blocks/broken.yaml"]
    assert f"over {MAX_BLOCK_BYTES:,} bytes" in reasons["blocks/huge.yaml"]
    assert "no group other" in reasons["blocks/other.yaml"]
    assert "no block name" in reasons["blocks/9bad.yaml"]
    assert "UTF-8" in reasons["blocks/latin.yaml"]
    assert "directory" in reasons["blocks/dir.yaml"] and "pipe" in reasons["blocks/pipe.yaml"]


def test_the_library_needs_the_token(studio, workspace):
    from starlette.testclient import TestClient

    from studio_server import PORT

    bare = TestClient(studio.app, base_url=f"http://127.0.0.1:{PORT}")
    assert bare.get("/api/blocks").status_code == 401
    assert bare.post("/api/blocks", json={"name": "x", "group": "outer", "document": with_groups()}).status_code == 401
    assert not (workspace / "blocks").exists()
