"""The node editor's text view, templates and drafts on the server (issue 49 items 2 and 3): every problem of a
document at once, a document as YAML or JSON text and back, the examples of examples/graphs/ (and nothing
beside them), and a graph with problems saved as a draft that is never a run."""

from __future__ import annotations

import json

import pytest

from extras import need

need("starlette")
need("httpx")

from starlette.testclient import TestClient

from studio_graphs import EXAMPLES, LAYOUT, RUN_SETTINGS, SETTINGS, check, small_gpt
from studio_server import PORT, TOKEN


def test_every_problem_is_said_at_once_each_on_its_node_and_port(client):
    broken = small_gpt()
    broken["nodes"] += [{"id": f"extra{i}", "op": "linear"} for i in range(3)]  # no input, no `out` param
    broken["edges"] = [edge for edge in broken["edges"] if edge["to"] != "final_norm.x"]
    errors = check(client, broken)["errors"]
    assert sorted(error["path"][0] for error in errors) == ["extra0", "extra1", "extra2", "final_norm"]
    assert next(error for error in errors if error["path"] == ["final_norm"])["port"] == "x"
    assert all(error["at"] for error in errors), "each problem names the node the page marks"


def test_what_reads_a_broken_node_is_not_blamed_for_it(client):
    broken = small_gpt()
    broken["nodes"][2] = {"id": "final_norm", "op": "layer_nrm"}
    (error,) = check(client, broken)["errors"]  # head and loss read it: not three problems
    assert error["path"] == ["final_norm"]


def test_a_document_goes_to_yaml_and_json_text_and_back(client):
    for form in ("yaml", "json"):
        text = client.post("/api/graph/text", json={"document": small_gpt(), "format": form}).json()["text"]
        assert (form == "json") == text.startswith("{")
        assert client.post("/api/graph/text", json={"text": text, "format": form}).json() == {"document": small_gpt()}
    text = client.post("/api/graph/text", json={"document": small_gpt()}).json()["text"]
    assert text.index("microgpt_graph") < text.index("dims") < text.index("nodes"), "the document's own order"


def test_text_that_does_not_read_says_why_and_on_which_line(client):
    answer = client.post("/api/graph/text", json={"text": "microgpt_graph: 1\nnodes: [\n  {id: a\nedges: []\n"})
    assert answer.status_code == 200 and "neither JSON nor YAML" in answer.json()["error"]
    assert answer.json()["line"] in (3, 4)
    answer = client.post("/api/graph/text", json={"text": '{"microgpt_graph": 1,\n "nodes": [}'}).json()
    assert answer["line"] == 2 and "not valid JSON" in answer["error"]
    answer = client.post("/api/graph/text", json={"text": "microgpt_graph: 1\nnodes: []\nedges: []\nwires: []\n"})
    assert "wires" in answer.json()["error"]


def test_the_examples_are_listed_and_read_and_nothing_else_is(client):
    listed = client.get("/api/graph/examples").json()["examples"]
    assert listed == sorted(p.name for p in EXAMPLES.iterdir() if p.suffix in (".json", ".yaml"))
    one = client.get("/api/graph/example", params={"name": listed[0]}).json()
    assert one["document"] == json.loads((EXAMPLES / listed[0]).read_text(encoding="utf-8"))
    for name in ("../graphs/" + listed[0], "../../pyproject.toml", "/etc/passwd", "", "README.md"):
        answer = client.get("/api/graph/example", params={"name": name})
        assert answer.status_code == 400 and "there is no example" in answer.json()["error"], name


def test_the_text_and_example_routes_need_the_token_and_the_studios_own_host(studio):
    bare = TestClient(studio.app, base_url=f"http://127.0.0.1:{PORT}")
    assert bare.get("/api/graph/examples").status_code == 401
    assert bare.get("/api/graph/example", params={"name": "gpt_bigram.json"}).status_code == 401
    assert bare.post("/api/graph/text", json={"document": small_gpt()}).status_code == 401
    rebound = bare.get("/api/graph/examples", headers={"Host": "evil.example:8765", "X-Studio-Token": TOKEN})
    assert rebound.status_code == 403


def test_a_graph_with_problems_saves_as_a_draft_that_is_never_a_run(client, workspace):
    broken = small_gpt()
    broken["edges"].pop()  # nothing goes to the graph's logits
    answer = client.post("/api/save", json={"name": "half", "document": broken, "layout": LAYOUT,
                                            "settings": RUN_SETTINGS})
    assert answer.status_code == 200 and answer.json()["draft"] is True
    assert answer.json()["file"] == "studio/drafts/half.json" and answer.json()["errors"]
    assert not (workspace / "studio.yaml").exists() and not (workspace / "graphs").exists()
    assert client.get("/api/configs").json() == {"runs": [], "drafts": ["half"]}
    loaded = client.get("/api/config", params={"name": "half", "draft": 1}).json()
    assert loaded["draft"] is True and loaded["document"] == broken and loaded["problems"]
    assert client.post("/api/runs/half/start").status_code >= 400, "a draft never trains"
    fixed = client.post("/api/save", json={"name": "half", "document": small_gpt(), "layout": LAYOUT,
                                           "settings": RUN_SETTINGS})
    assert fixed.status_code == 200 and "draft" not in fixed.json()
    assert client.get("/api/configs").json() == {"runs": ["half"], "drafts": []}


@pytest.mark.parametrize("name", ["../up", "a/b", ".."])
def test_a_draft_is_written_only_under_its_own_name(client, workspace, name):
    answer = client.post("/api/save", json={"name": name, "document": {"nodes": 5}, "settings": SETTINGS})
    assert answer.status_code == 400
    assert not (workspace / "studio" / "drafts").exists()
