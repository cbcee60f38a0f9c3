"""The node editor's server side through Starlette's TestClient: the palette held to the primitives and the
library, the check of a graph document with its run settings (errors on the node, port, edge or setting they
name; shapes on the wires the compiler bound, also before a problem; each node's parameters, memory and
share; the causality verdict), family mode; and the hostile requests, each one line and nothing written."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from extras import need
from peak_memory import PeakMemory

need("starlette")
need("httpx")

from starlette.testclient import TestClient

from microgpt.backends import backend_class
from microgpt.model.attention import MASKS
from microgpt.model.family import family, n_params
from microgpt.model.graph.compile import MAX_NODES, _Compiler, compile_graph
from microgpt.model.graph.from_family import document_for
from microgpt.model.graph.library import library_groups, with_library
from microgpt.model.graph.memory import program_parts
from microgpt.model.graph.ops import OPS
from microgpt.model.graph.ops.basic import INITS
from microgpt.model.memory import estimate_training_bytes
from microgpt.settings.sources import Settings
from microgpt.studio import graph_api, graph_palette
from studio_graphs import EXAMPLES, LAYOUT, RUN_SETTINGS, SETTINGS, check, small_gpt
from studio_server import PORT, TOKEN, one_line_error
from studio_workspace import ensemble_run

WAIT_S = 60  # only a limit for a hang: a loaded machine takes longer, never fails for it


def settled(client, document, settings=None) -> dict:
    """A check whose causality verdict is in (a graph here is small: it comes with the first answer or soon)."""
    for _ in range(200):
        result = check(client, document, settings)
        if not result["causality"]["pending"]:
            return result
    pytest.fail("the causality verdict never came")


# ---- the palette ---------------------------------------------------------------------------------------

def test_the_palette_lists_every_primitive_and_library_group_with_its_ports(client):
    palette = client.get("/api/graph/palette").json()
    assert [op["name"] for op in palette["ops"]] == list(OPS)
    assert {group["name"] for group in palette["groups"]} == set(library_groups())
    assert palette["types"] == ["token_ids", "stream", "logits", "weights"]
    add = next(op for op in palette["ops"] if op["name"] == "add")
    assert add["inputs"] == [{"name": "in", "type": "float", "kinds": ["stream", "logits"], "many": True}]
    linear = next(op for op in palette["ops"] if op["name"] == "linear")
    assert {"name": "out", "default": None, "required": True} in linear["params"]
    assert {"name": "bias", "default": True, "required": False, "choices": [True, False]} in linear["params"]
    # a word-valued param lists the words its op accepts: the editor draws it as a menu of them
    assert {"name": "init", "default": "he", "required": False, "choices": list(INITS)} in linear["params"]
    attention = next(op for op in palette["ops"] if op["name"] == "attention")
    assert next(p for p in attention["params"] if p["name"] == "mask")["choices"] == list(MASKS)
    assert "choices" not in next(p for p in attention["params"] if p["name"] == "heads")
    assert next(op for op in palette["ops"] if op["name"] == "cross_entropy")["outputs"] == []
    block = next(group for group in palette["groups"] if group["name"] == "transformer_block")
    assert block["inputs"] == [{"name": "x", "type": "stream[d]", "kinds": ["stream"]}] and block["nodes"]


def documents() -> list[dict]:
    """Documents using every primitive between them: the examples and each family's graph."""
    found = [json.loads(path.read_text(encoding="utf-8")) for path in sorted(EXAMPLES.glob("*.json"))]
    for name, values in (("gpt", {}), ("ensemble", {"cooperative": "d8x8n1,d8x8n1", "prior": "bigram"}),
                         ("lookahead", {"lookahead": 2, "lookahead_mode": "gap"})):
        settings = Settings({"family": name, **values})
        found.append(document_for(name, settings.model_config(65)))
    return found


def test_the_palettes_output_kinds_are_what_the_compiler_infers():
    """OUTPUT_KINDS is written by hand beside the ops: every op has an entry, and every node compiled from the
    examples and the families' graphs has outputs of that kind ("float": its input's)."""
    assert set(graph_palette.OUTPUT_KINDS) == {name for name, op in OPS.items() if op.outputs}
    seen = set()
    for document in documents():
        program = compile_graph(with_library(document), 65, 16)
        for node in program.nodes:
            name = {"linear_relu": "linear", "rope_attention": "attention"}.get(node.op.name, node.op.name)
            for kind in node.types.values():
                expected = graph_palette.OUTPUT_KINDS[name]
                if expected == "float":
                    expected = node.in_types[next(iter(node.op.inputs))][0].kind
                assert kind.kind == expected, (name, kind)
            seen.add(name)
    assert seen >= {"embedding", "linear", "logits", "add", "router", "mix", "prior", "zeros", "attention"}


# ---- the check -------------------------------------------------------------------------------------------

def test_a_sound_document_is_ok_with_shapes_costs_and_the_causality_verdict(client, workspace):
    document = json.loads((EXAMPLES / "parallel_block.json").read_text(encoding="utf-8"))
    result = settled(client, document)
    assert result["ok"] and result["errors"] == []
    assert result["causality"]["ok"] is True and result["causality"]["message"].startswith("sound")
    wires = {(w["body"], w["from"], w["to"]): w for w in result["wires"]}
    assert wires[("", "tok_emb.out", "blocks.x")]["type"] == "stream[64]"
    assert wires[("", "tok_emb.out", "blocks.x")]["shape"] == "[T, 64]"
    assert wires[("", "head.out", "logits")]["type"] == "logits"
    assert wires[("parallel_block", "ln.out", "attn.x")]["shape"] == "[T, 64]"
    top = {key: value for key, value in result["nodes"].items() if key.startswith("/")}
    assert set(top) == {f"/{node['id']}" for node in document["nodes"]}
    assert sum(value["parameters"] for value in top.values()) == result["parameters"]
    assert sum(value["share"] for value in top.values()) == pytest.approx(1.0)
    assert result["nodes"]["parallel_block/attn"]["instances"] == 4
    assert top["/blocks"]["share"] > 0.9  # where the matrix products are
    config = family("graph").Config(vocab_size=len(set((workspace / "tiny.txt").read_text())), graph=document,
                                    seq_len=16)
    assert result["parameters"] == sum(spec.size for spec in config.program.specs)
    assert result["memory_bytes"] == estimate_training_bytes(family("graph"), config, 4, backend_class("numpy")())
    kept = program_parts(config.program, 4, backend_class("numpy")())["activations"]
    assert sum(value["memory_bytes"] for value in top.values()) == kept, "each node's part of what a step keeps"
    assert result["tokens_per_second"] > 0 and result["description"].startswith("graph of")


def test_a_shape_error_names_its_node_and_port_and_the_wires_bound_before_it_keep_their_shapes(client):
    document = small_gpt()
    document["nodes"].insert(2, {"id": "narrow", "op": "linear", "params": {"out": 8}})
    document["edges"][2] = {"from": "blocks.x", "to": "narrow.x"}
    document["edges"].append({"from": "narrow.out", "to": "final_norm.x"})
    document["nodes"][3] = {"id": "final_norm", "op": "layer_norm"}
    document["edges"][3] = {"from": "final_norm.out", "to": "head.x"}
    document["nodes"].append({"id": "mix_in", "op": "add"})  # add of stream[16] and stream[8]
    document["edges"] += [{"from": "narrow.out", "to": "mix_in.in"}, {"from": "blocks.x", "to": "mix_in.in"}]
    result = check(client, document)
    assert not result["ok"]
    (error,) = result["errors"]
    assert error["path"] == ["mix_in"] and error["port"] == "in" and error["at"] == ["/mix_in"]
    assert "expects" in error["message"] or "same" in error["message"]
    wires = {(w["from"], w["to"]): w["shape"] for w in result["wires"]}
    assert wires[("blocks.x", "narrow.x")] == "[T, 16]" and wires[("narrow.out", "mix_in.in")] == "[T, 8]"
    assert result["causality"] is None and result["nodes"] == {}


def test_the_causality_check_waits_for_the_other_problems_and_skips_a_graph_too_big_to_check(client, monkeypatch):
    result = check(client, small_gpt(), {**SETTINGS, "max_memory": "64KiB"})
    assert result["causality"] == {"ok": None, "pending": False,
                                   "message": "checked once the other problems are fixed"}
    monkeypatch.setattr(graph_api, "CAUSALITY_MAX_PARAMETERS", 1000)
    result = check(client, small_gpt())
    assert result["ok"] and result["causality"]["ok"] is None and not result["causality"]["pending"]
    assert "microgpt train checks it" in result["causality"]["message"]


def test_sizes_past_any_model_are_one_line_errors(client):
    document = small_gpt()
    document["dims"]["d"] = 10**400
    (error,) = check(client, document)["errors"]
    assert "no layer is that wide" in error["message"] and error["path"] == []
    document["dims"]["d"] = 2**31
    result = check(client, document, {**SETTINGS, "batch_size": 2**31})  # (a seq_len past the text is that error)
    (error,) = result["errors"]
    assert error["setting"] == "batch_size" and "needs more than 1024.0 TiB" in error["message"]
    assert result["memory"] == "more than 1024.0 TiB" and result["tokens_per_second"] is None


def test_an_error_inside_a_group_names_the_path_through_its_instances(client):
    document = small_gpt()
    document["groups"] = {"transformer_block": copy.deepcopy(library_groups()["transformer_block"])}
    block = document["groups"]["transformer_block"]
    block["nodes"] = [node for node in block["nodes"] if node["id"] != "ln1"]  # its edges now dangle
    block["edges"] = [edge for edge in block["edges"] if edge["from"] != "x" or not edge["to"].startswith("ln1")]
    result = check(client, document)
    (error,) = result["errors"]
    assert error["path"][:2] == ["blocks", "0"] and error["at"][0] == "/blocks"
    assert "ln1" in error["message"]
    assert error.get("edge", {}).get("body") == "transformer_block"


def test_a_cycle_an_unknown_op_and_a_missing_input_each_name_their_node(client):
    cycle = small_gpt()
    cycle["nodes"].append({"id": "a", "op": "relu"})
    cycle["nodes"].append({"id": "b", "op": "relu"})
    cycle["edges"] += [{"from": "a.out", "to": "b.x"}, {"from": "b.out", "to": "a.x"}]
    (error,) = check(client, cycle)["errors"]
    assert "cycle" in error["message"] and error["path"][0] in ("a", "b")
    unknown = small_gpt()
    unknown["nodes"][2] = {"id": "final_norm", "op": "layer_nrm"}
    (error,) = check(client, unknown)["errors"]
    assert error["path"] == ["final_norm"] and "did you mean 'layer_norm'" in error["message"]
    missing = small_gpt()
    missing["edges"] = [edge for edge in missing["edges"] if edge["to"] != "final_norm.x"]
    (error,) = check(client, missing)["errors"]
    assert error["path"] == ["final_norm"] and error["port"] == "x"


def test_a_graph_that_sees_the_future_is_refused_at_the_node_where_it_enters(client):
    document = small_gpt()
    document["groups"] = {"attention": copy.deepcopy(library_groups()["attention"])}
    for node in document["groups"]["attention"]["nodes"]:
        if node.get("op") == "attention":
            node.setdefault("params", {})["mask"] = "full"
    result = settled(client, document)
    assert result["causality"]["ok"] is False and "sees the future" in result["causality"]["message"]
    (error,) = result["errors"]
    assert error["path"][:3] == ["blocks", "0", "attn"] and error["at"][:2] == ["/blocks", "transformer_block/attn"]


def test_settings_problems_are_errors_on_their_setting(client):
    result = check(client, small_gpt(), {"file": "tiny.txt", "seq_len": "sixteen", "batch_size": 0})
    problems = {error["setting"]: error for error in result["errors"]}
    assert set(problems) == {"seq_len", "batch_size"}
    assert all(error["path"] == [] and error["port"] is None for error in result["errors"])
    assert problems["seq_len"]["message"].startswith("seq_len must be a whole number")  # the field, not the flag
    assert result["wires"], "the document is still compiled (for the default context) and its shapes shown"
    (error,) = check(client, small_gpt(), {"file": "missing.txt"})["errors"]
    assert error["setting"] == "file"
    (error,) = check(client, small_gpt(), {**SETTINGS, "d_model": 32})["errors"]
    assert error["setting"] == "d_model" and "graph family has no d_model" in error["message"]
    (error,) = check(client, small_gpt(), {**SETTINGS, "graph": "x.json"})["errors"]
    assert error["setting"] == "graph"
    (error,) = check(client, small_gpt(), {**SETTINGS, "max_memory": "64KiB"})["errors"]
    assert error["setting"] == "batch_size" and "--max-memory" in error["message"]


def test_a_text_shorter_than_one_window_is_an_error_before_training(client, workspace):
    (workspace / "short.txt").write_text("abc", encoding="utf-8")
    errors = check(client, small_gpt(), {"file": "short.txt", "seq_len": 16})["errors"]
    assert len(errors) == 1 and "has 3 tokens, fewer than seq_len + 1 = 17" in errors[0]["message"]


def test_the_vocabulary_and_context_come_from_the_settings(client, workspace):
    result = check(client, small_gpt(), {"file": "tiny.txt", "seq_len": 8})
    wires = {(w["from"], w["to"]): w["shape"] for w in result["wires"]}
    assert wires[("head.out", "logits")] == f"[T, {len(set((workspace / 'tiny.txt').read_text()))}]"
    bpe = check(client, small_gpt(), {"file": "tiny.txt", "tokenizer": "bpe", "vocab_size": 300})
    assert {(w["from"], w["to"]): w["shape"] for w in bpe["wires"]}[("head.out", "logits")] == "[T, 300]"


def test_family_mode_checks_the_familys_settings_and_its_graph(client, workspace):
    settings = {**SETTINGS, "cooperative": "d8x8n1,d8x8n1", "stream_dim": 16}
    result = check(client, None, settings, family="ensemble")
    assert result["ok"], result["errors"]
    assert {"/expert1", "/expert2", "/stream1", "/router", "/mix"} <= set(result["nodes"])
    vocab = len(set((workspace / "tiny.txt").read_text()))
    config = Settings({"family": "ensemble", **settings}).model_config(vocab)
    assert result["parameters"] == n_params(family("ensemble"), config)
    assert result["memory_bytes"] == estimate_training_bytes(family("ensemble"), config, 4, backend_class("numpy")())
    bad = check(client, None, {**SETTINGS, "cooperative": "d8x8n1", "stream_dim": "wide"}, family="ensemble")
    assert [error["setting"] for error in bad["errors"]] == ["stream_dim"]
    wrong = check(client, None, {**settings, "lookahead": 2}, family="ensemble")
    assert [error["setting"] for error in wrong["errors"]] == ["lookahead"]
    (error,) = check(client, None, SETTINGS, family="graph")["errors"]
    assert error["setting"] == "family"


def test_every_editor_route_needs_the_token_and_the_studios_own_host(studio):
    bare = TestClient(studio.app, base_url=f"http://127.0.0.1:{PORT}")
    assert bare.get("/api/graph/palette").status_code == 401 and bare.get("/api/graph/settings").status_code == 401
    for route in ("/api/graph/check", "/api/graph/from-family", "/api/graph/layout", "/api/save"):
        assert bare.post(route, json={"document": small_gpt(), "family": "gpt"}).status_code == 401, route
        rebound = bare.post(route, json={}, headers={"Host": "evil.example:8765", "X-Studio-Token": TOKEN})
        assert rebound.status_code == 403, route


# ---- from-family and layouts ---------------------------------------------------------------------------------

def positions_of(layout: dict, body: str) -> dict:
    prefix = f"{body}/"
    return {key[len(prefix):]: xy for key, xy in layout["positions"].items() if key.startswith(prefix)}


def assert_laid_out(document: dict, layout: dict) -> None:
    """Every node of the top level and of every group body it uses has a place of its own."""
    assert layout["version"] == 1 and layout["collapsed"] == []
    for body, nodes in [("", document["nodes"]),
                        *((name, group["nodes"]) for name, group in with_library(document)["groups"].items())]:
        places = positions_of(layout, body)
        assert set(places) == {node["id"] for node in nodes}, body
        assert len({tuple(xy) for xy in places.values()}) == len(places), f"two nodes of {body or 'the top'} overlap"
        for a, (xa, ya) in places.items():  # as drawn: the editor's nodes are 190 wide, a group's up to 140 high
            for b, (xb, yb) in places.items():
                assert a == b or abs(xa - xb) >= 190 or abs(ya - yb) >= 140, f"{a} and {b} of {body!r} overlap"


def test_from_family_draws_an_ensemble_as_a_stream_bus_over_its_experts(client):
    settings = {"cooperative": "d8x8n1,d8x8n1,d8x8n1", "stream_dim": 16, "prior": "bigram", "steps": 5}
    answer = client.post("/api/graph/from-family", json={"family": "ensemble", "settings": settings}).json()
    assert answer["errors"] == []
    shape = Settings({"family": "ensemble", "cooperative": settings["cooperative"], "stream_dim": 16,
                      "prior": "bigram"})
    assert answer["document"] == document_for("ensemble", shape.model_config(65))
    layout = answer["layout"]
    assert_laid_out(answer["document"], layout)
    top = positions_of(layout, "")
    experts = [top[f"expert{i}"] for i in (1, 2, 3)]
    adds = [top["prior_narrow"]] + [top[f"stream{i}"] for i in (1, 2, 3)]
    assert len({y for _, y in experts}) == 1 and len({y for _, y in adds}) == 1, "each in one row"
    assert adds[0][1] < experts[0][1] < top["mix"][1], "the bus above, the mix below"
    assert [x for x, _ in experts] == sorted(x for x, _ in experts), "side by side, in order"
    for i, (x, _) in enumerate(experts):
        assert adds[i][0] < x < adds[i + 1][0], "each between the stream it reads and the add it writes"
    assert max(x for x, _ in experts) < top["mix"][0] < top["loss"][0], "the logits flow right, into the mix"
    assert top["router"][1] == adds[0][1] and adds[-1][0] < top["router"][0] < top["mix"][0], "the router on the bus"
    assert top["prior"][0] < adds[0][0]


def test_from_family_draws_lookahead_as_a_trunk_with_its_heads_side_by_side(client):
    answer = client.post("/api/graph/from-family", json={"family": "lookahead",
                                                         "settings": {"lookahead": 3, "d_model": 16}}).json()
    top = positions_of(answer["layout"], "")
    trunk = [top[node] for node in ("tok_emb", "blocks", "final_norm", "head", "loss")]
    assert len({y for _, y in trunk}) == 1 and [x for x, _ in trunk] == sorted(x for x, _ in trunk), "a row"
    heads = [top[f"head{k}"] for k in (1, 2, 3)]
    assert len({y for _, y in heads}) == 1 and heads[0][1] > trunk[0][1], "side by side, below the trunk"
    assert [x for x, _ in heads] == sorted(x for x, _ in heads) and heads[0][0] > top["blocks"][0]
    assert_laid_out(answer["document"], answer["layout"])
    gpt = client.post("/api/graph/from-family", json={"family": "gpt", "settings": {"n_layers": 2}}).json()
    assert len({y for _, y in positions_of(gpt["layout"], "").values()}) == 1, "gpt is a row"


def test_from_family_reports_each_bad_shape_setting_and_refuses_a_family_without_a_graph(client):
    answer = client.post("/api/graph/from-family", json={"family": "gpt", "settings": {"n_layers": "x",
                                                                                     "file": "none.txt"}}).json()
    assert answer["document"] is None and [e["setting"] for e in answer["errors"]] == ["n_layers"]
    refused = client.post("/api/graph/from-family", json={"family": "graph", "settings": {}})
    assert refused.status_code == 400 and "from-family" in refused.json()["error"]


def test_any_document_is_laid_out_left_to_right_without_overlaps_even_with_a_cycle(client):
    for path in sorted(EXAMPLES.glob("*.json")):
        document = json.loads(path.read_text(encoding="utf-8"))
        layout = client.post("/api/graph/layout", json={"document": document}).json()["layout"]
        assert_laid_out(document, layout)
        top = positions_of(layout, "")
        for edge in document["edges"]:
            source, target = edge["from"].partition(".")[0], edge["to"].partition(".")[0]
            if source in top and target in top:
                assert top[source][0] < top[target][0], (path.name, edge)
    draft = small_gpt()
    draft["nodes"] += [{"id": "a", "op": "relu"}, {"id": "b", "op": "relu"}]
    draft["edges"] += [{"from": "a.out", "to": "b.x"}, {"from": "b.out", "to": "a.x"}]
    assert_laid_out(draft, client.post("/api/graph/layout", json={"document": draft}).json()["layout"])


# ---- saving and loading graph runs ---------------------------------------------------------------------------



def graph_body(name: str = "g1", **extra) -> dict:
    return {"name": name, "document": small_gpt(), "layout": LAYOUT, "settings": RUN_SETTINGS, **extra}


def written(workspace: Path) -> set[str]:
    """Every file of the workspace but the text and prompts make_workspace writes."""
    return {str(p.relative_to(workspace)) for p in workspace.rglob("*") if p.is_file()} - {"tiny.txt", "prompts.tsv"}


@pytest.mark.slow
def test_a_saved_graph_run_loads_back_and_trains_from_the_cli(client, workspace, tmp_path):
    answer = client.post("/api/save", json=graph_body())
    assert answer.status_code == 200, answer.text
    saved = answer.json()
    assert saved["graph"] == "graphs/g1.json" and saved["layout"] == "studio/layout/g1.json"
    assert saved["command"] == "microgpt train --config studio.yaml --run g1"
    assert json.loads((workspace / "graphs" / "g1.json").read_text(encoding="utf-8")) == small_gpt()
    assert json.loads((workspace / "studio" / "layout" / "g1.json").read_text(encoding="utf-8")) == LAYOUT
    assert written(workspace) == {"studio.yaml", "graphs/g1.json", "studio/layout/g1.json"}
    loaded = client.get("/api/config", params={"name": "g1"}).json()
    assert loaded["family"] == "graph" and loaded["document"] == small_gpt() and loaded["layout"] == LAYOUT
    assert loaded["settings"] == RUN_SETTINGS and loaded["graph"] == "graphs/g1.json"
    # the run's graph is relative to studio.yaml, as its file is: the CLI trains it from any directory
    trained = subprocess.run([sys.executable, "-m", "microgpt", "train", "--config", str(workspace / "studio.yaml"),
                              "--run", "g1", "--model", str(workspace / "checkpoints" / "g1")],
                             check=False, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert trained.returncode == 0, trained.stderr
    config = json.loads((workspace / "checkpoints" / "g1" / "config.json").read_text(encoding="utf-8"))
    assert config["family"] == "graph"
    state = json.loads((workspace / "checkpoints" / "g1" / "train_state.json").read_text(encoding="utf-8"))
    assert state["step"] == 3


@pytest.mark.slow
def test_a_saved_graph_run_trains_when_the_studio_starts_it(client, studio, workspace):
    assert client.post("/api/save", json=graph_body("g2")).status_code == 200
    started = client.post("/api/runs/g2/start").json()
    assert started["running"] and started["checkpoint"] == "checkpoints/g2"
    assert studio.manager.runs["g2"].process.wait(600) == 0, studio.manager.log_tail("g2")
    state = json.loads((workspace / "checkpoints" / "g2" / "train_state.json").read_text(encoding="utf-8"))
    assert state["step"] == 3
    row = next(row for row in client.get("/api/runs").json()["runs"] if row["path"] == "checkpoints/g2")
    assert row["family"] == "graph"


def test_saving_a_graph_run_again_with_another_graph_asks_first(client, workspace):
    assert client.post("/api/save", json=graph_body()).status_code == 200
    assert client.post("/api/save", json=graph_body()).status_code == 200, "the very same run replaces nothing"
    changed = graph_body()
    changed["document"]["dims"]["d"] = 24
    answer = client.post("/api/save", json=changed)
    assert answer.status_code == 409 and answer.json()["exists"] is True and answer.json()["suggested"] == "g1-2"
    assert json.loads((workspace / "graphs" / "g1.json").read_text(encoding="utf-8")) == small_gpt()
    assert client.post("/api/save", json={**changed, "overwrite": True}).status_code == 200
    assert json.loads((workspace / "graphs" / "g1.json").read_text(encoding="utf-8"))["dims"]["d"] == 24
    (workspace / "graphs" / "mine.json").write_text("{}", encoding="utf-8")  # a document no run saved
    answer = client.post("/api/save", json=graph_body("mine"))
    assert answer.status_code == 409 and "no run's document" in answer.json()["error"]
    assert (workspace / "graphs" / "mine.json").read_text(encoding="utf-8") == "{}"


def test_a_graph_with_problems_is_not_saved_as_a_run(client, workspace):
    broken = graph_body()
    broken["document"]["edges"].pop()  # nothing goes to the graph's logits
    answer = client.post("/api/save", json=broken)
    assert answer.json()["draft"] is True and answer.json()["errors"][0]["message"]
    leaking = graph_body()
    leaking["document"]["groups"] = {"attention": copy.deepcopy(library_groups()["attention"])}
    for node in leaking["document"]["groups"]["attention"]["nodes"]:
        if node.get("op") == "attention":
            node.setdefault("params", {})["mask"] = "full"
    answer = client.post("/api/save", json=leaking)
    assert answer.json()["draft"] is True and "sees the future" in answer.json()["errors"][0]["message"]
    assert written(workspace) == {"studio/drafts/g1.json"}  # a draft (test_studio_graph_text_api.py), no run


def test_a_family_run_keeps_its_layout(client, workspace):
    run = ensemble_run(steps=5)
    answer = client.post("/api/save", json={"name": "ens", **run, "layout": LAYOUT})
    assert answer.status_code == 200 and answer.json()["layout"] == "studio/layout/ens.json"
    loaded = client.get("/api/config", params={"name": "ens"}).json()
    assert loaded["family"] == "ensemble" and loaded["layout"] == LAYOUT
    assert loaded["settings"]["cooperative"] == "d2x8n1,d2x8n1"
    assert client.post("/api/save", json={"name": "ens2", **run}).status_code == 200
    assert "layout" not in client.get("/api/config", params={"name": "ens2"}).json()


# ---- hostile requests: one line each, nothing written ----------------------------------------------------------

@pytest.mark.parametrize("name", ["../up", "a/b", "a\0b", "..", ".hidden", "", "x" * 65, 5, None, ["a"]])
def test_a_bad_run_name_is_refused_before_anything_is_written(client, workspace, name):
    assert "run name" in one_line_error(client.post("/api/save", json={**graph_body(), "name": name}), 400)
    assert written(workspace) == set()


@pytest.mark.parametrize("layout", [[], "x", {"version": 2}, {"positions": {"../x": [0, 0]}},
                                    {"positions": {"/a": [0]}}, {"positions": {"/a": [1e300, 0]}}, {"collapsed": "all"},
                                    {"viewport": {"x": "far"}}, {"extra": 1}])
def test_a_bad_layout_is_refused_and_nothing_is_written(client, workspace, layout):
    one_line_error(client.post("/api/save", json={**graph_body(), "layout": layout}), 400)
    one_line_error(client.post("/api/save", json={"name": "ens", **ensemble_run(), "layout": layout}), 400)
    assert written(workspace) == set()


@pytest.mark.parametrize("route", ["/api/graph/check", "/api/graph/from-family", "/api/graph/layout", "/api/save"])
@pytest.mark.parametrize("body", ["[]", '"text"', "5", "null", "{", '{"document": [], "settings": []}'])
def test_a_body_that_is_no_object_of_the_right_kind_is_one_line(client, workspace, route, body):
    answer = client.post(route, content=body, headers={"Content-Type": "application/json"})
    if route == "/api/graph/check" and body.startswith('{"'):
        assert answer.status_code == 200 and answer.json()["errors"][0]["message"]
    else:
        one_line_error(answer, 400)
    assert written(workspace) == set()


def test_a_huge_or_deep_document_is_refused(client, workspace):
    huge = small_gpt()
    huge["description"] = "x" * (2 * 1024 * 1024)  # past the studio's body limit
    assert client.post("/api/graph/check", json={"document": huge}).status_code == 413
    deep: dict = {}
    inner = deep
    for _ in range(80):  # past a document's 64 levels
        inner["a"] = {}
        inner = inner["a"]
    document = {**small_gpt(), "description": "deep", "dims": {"d": 16, "d_ff": 32, "heads": 2}}
    document["groups"] = {"g": {"description": "x", "params": deep}}
    for route in ("/api/graph/check", "/api/save"):
        answer = client.post(route, json={**graph_body(), "document": document})
        errors = answer.json()["errors"] if answer.status_code == 200 else answer.json().get("errors") or [
            {"message": one_line_error(answer, 400)}]
        assert any("deeper than 64" in error["message"] for error in errors), route
    one_line_error(client.post("/api/graph/layout", json={"document": document}), 400)
    assert written(workspace) == set()


def test_a_graph_run_whose_document_points_out_or_is_a_yaml_bomb_is_refused_on_load(client, workspace):
    outside = workspace.parent / "outside.json"
    outside.write_text(json.dumps(small_gpt()), encoding="utf-8")
    bomb = "microgpt_graph: 1\na: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(9))
    (workspace / "bomb.yaml").write_text(bomb, encoding="utf-8")
    (workspace / "studio.yaml").write_text(
        "runs:\n  out: {family: graph, graph: ../outside.json}\n  bomb: {family: graph, graph: bomb.yaml}\n",
        encoding="utf-8")
    assert "outside the workspace" in one_line_error(client.get("/api/config", params={"name": "out"}), 403)
    assert "aliases" in one_line_error(client.get("/api/config", params={"name": "bomb"}), 400)
    for name in ("../x", "a/b"):
        one_line_error(client.get("/api/config", params={"name": name}), 400)


def test_the_studios_files_are_never_written_through_a_link_out(client, workspace):
    outside = workspace.parent / "elsewhere"
    outside.mkdir()
    (workspace / "graphs").symlink_to(outside)
    assert "outside the workspace" in one_line_error(client.post("/api/save", json=graph_body()), 403)
    (workspace / "graphs").unlink()
    (workspace / "graphs").mkdir()
    (workspace / "graphs" / "g1.json").symlink_to(outside / "g1.json")
    assert "symlink" in one_line_error(client.post("/api/save", json=graph_body()), 403)
    (workspace / "studio").mkdir()
    (workspace / "studio" / "layout").symlink_to(outside)
    (workspace / "graphs" / "g1.json").unlink()
    one_line_error(client.post("/api/save", json={"name": "ens", **ensemble_run(), "layout": LAYOUT}), 403)
    assert list(outside.iterdir()) == []
    assert not (workspace / "studio.yaml").exists()


@pytest.mark.parametrize("where", ["graphs/g1.json", "studio/layout/g1.json"])
def test_a_directory_where_the_studio_writes_its_file_is_one_line_and_kept(client, workspace, where):
    (workspace / where).mkdir(parents=True)
    message = one_line_error(client.post("/api/save", json=graph_body(overwrite=True)), 400)
    assert f"{where} is a directory" in message
    assert (workspace / where).is_dir() and written(workspace) == set()


def nested(depth: int, repeat: int, leaf: list[dict]) -> dict:
    """small_gpt whose blocks are group g0, which holds `repeat` copies of g1, ..., down to a body of `leaf`."""
    document = small_gpt()
    groups = {f"g{depth}": {"inputs": {"x": "stream[d]"}, "outputs": {"x": "stream[d]"}, "nodes": leaf,
                            "edges": [{"from": "x", "to": "n.x"}, {"from": "n.out", "to": "x"}] if leaf else
                            [{"from": "x", "to": "x"}]}}
    for i in reversed(range(depth)):  # each group after the one it uses
        groups[f"g{i}"] = {"inputs": {"x": "stream[d]"}, "outputs": {"x": "stream[d]"},
                           "nodes": [{"id": "a", "group": f"g{i + 1}", "repeat": repeat}],
                           "edges": [{"from": "x", "to": "a.x"}, {"from": "a.x", "to": "x"}]}
    document["groups"] = groups
    document["nodes"][1] = {"id": "blocks", "group": "g0"}
    return document


def towers(count: int) -> dict:
    """small_gpt whose blocks are `count` towers of 1000 blocks side by side, summed."""
    document = small_gpt()
    towers = [{"id": f"t{i}", "group": "transformer_block", "repeat": 1000} for i in range(count)]
    document["nodes"] = [document["nodes"][0], *towers, {"id": "sum", "op": "add"}, *document["nodes"][2:]]
    document["edges"] = [edge for edge in document["edges"] if "blocks" not in edge["from"] + edge["to"]] + [
        *({"from": "tok_emb.out", "to": f"t{i}.x"} for i in range(count)),
        *({"from": f"t{i}.x", "to": "sum.in"} for i in range(count)), {"from": "sum.out", "to": "final_norm.x"}]
    return document


@pytest.mark.parametrize("document, where", [
    (nested(30, 4, [{"id": "n", "op": "layer_norm"}]), "blocks"),  # 4^30 LayerNorms
    (nested(30, 1000, []), "blocks"),  # 1000^30 copies of an empty group
    ({**small_gpt(), "groups": {"big": {"inputs": {"x": "stream[d]"}, "outputs": {"x": "stream[d]"},
                                        "nodes": [{"id": "a", "group": "transformer_block", "repeat": 1000}],
                                        "edges": [{"from": "x", "to": "a.x"}, {"from": "a.x", "to": "x"}]}},
      "nodes": [{**node, "group": "big", "repeat": 1000} if node["id"] == "blocks" else node
                for node in small_gpt()["nodes"]]}, "blocks"),
    (towers(20), "t0")])  # 20 x 11,000 primitives, each tower under the limit
def test_a_graph_whose_groups_multiply_past_the_limit_is_refused_at_once_where_it_does(client, document, where,
                                                                                      monkeypatch):
    expanded = []  # each primitive and group copy the compiler makes: counted, not timed, so load cannot fail it

    def counted(real):
        def method(self, *args, **kwargs):
            expanded.append(real.__name__)
            return real(self, *args, **kwargs)
        return method

    monkeypatch.setattr(_Compiler, "primitive", counted(_Compiler.primitive))
    monkeypatch.setattr(_Compiler, "instance", counted(_Compiler.instance))
    result = check(client, document)
    assert result["errors"][0]["path"] == [where] and f"more than {MAX_NODES:,}" in result["errors"][0]["message"]
    assert len(expanded) < 100, f"the check must stay bounded: it expanded {len(expanded):,} nodes"


def test_the_studio_answers_while_a_check_runs(studio, monkeypatch):
    entered, release, released = threading.Event(), threading.Event(), []

    def slow(body, workspace):
        entered.set()
        released.append(release.wait(WAIT_S))  # False: it waited out the limit, so nothing was answered meanwhile
        return graph_api.GraphCheck()

    monkeypatch.setattr("microgpt.studio.app.check_request", slow)
    with TestClient(studio.app, base_url=f"http://127.0.0.1:{PORT}", headers={"X-Studio-Token": TOKEN}) as client:
        checking = threading.Thread(target=client.post, args=("/api/graph/check",), kwargs={"json": {}})
        checking.start()  # one event loop serves both requests, as the studio's server does
        try:
            assert entered.wait(WAIT_S), "the check never started"
            # answered while the check still waits for `release`: had the check held the event loop, this request
            # would wait for it, and the check would wait out its limit
            assert client.get("/api/free-name").status_code == 200
            assert not released, "the check held the event loop"
        finally:
            release.set()
            checking.join()
    assert released == [True]


@pytest.mark.parametrize("cooperative", ["d99999999999n3,d64n3", "d4000000000x16n2", "d8192x1n1", "d64n3,d2x8"])
def test_an_expert_spec_past_any_model_is_one_line_on_its_setting_at_once(client, cooperative):
    with PeakMemory() as memory:  # the memory it takes, not the time (which load stretches): no head is made
        answer = client.post("/api/graph/from-family", json={"family": "ensemble",
                                                             "settings": {"cooperative": cooperative}})
    # 0.1 MB, 2.7 MB with a first request's imports; 6 billion heads made one by one would take tens of gigabytes
    assert memory.bytes < 256 * 2**20, f"{memory.bytes:,} bytes at the peak: the spec's heads were made one by one"
    error, = answer.json()["errors"]
    assert error["setting"] == "cooperative" and "\n" not in error["message"]
    assert check(client, None, {**SETTINGS, "cooperative": cooperative}, family="ensemble")["errors"] == [error]
