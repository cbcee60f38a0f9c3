"""Nothing is read from outside the workspace through what a checkpoint or a dataset in it names (issue 52,
item B): a checkpoint's graph is the document stored in its config.json, and a path put there is refused
unread, by the studio's routes and the CLI alike, in one message whether the file it names exists or not; a
prepared dataset whose shards link out is scored, checked and trained by no route, as the run list already
refuses it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from extras import need

need("starlette")
need("httpx")

import microgpt
from dataset_files import write_dataset
from microgpt.cli import main
from studio_server import one_line_error
from studio_workspace import check_body, lookahead_run

REFUSED = "model.graph is a path, but a checkpoint holds its graph document itself and reads no other file"
DOCUMENT = {"microgpt_graph": 1, "dims": {"d": 8}, "nodes": [
    {"id": "emb", "op": "embedding"}, {"id": "head", "op": "logits"}, {"id": "loss", "op": "cross_entropy"}],
    "edges": [{"from": "tokens", "to": "emb.ids"}, {"from": "emb.out", "to": "head.x"},
              {"from": "head.out", "to": "loss.logits"}, {"from": "head.out", "to": "logits"}]}


def graph_checkpoint(folder: Path) -> Path:
    """A graph model trained a step on folder/tiny.txt, saved to folder/ck."""
    (folder / "g.json").write_text(json.dumps(DOCUMENT), encoding="utf-8")
    microgpt.train(str(folder / "tiny.txt"), graph=str(folder / "g.json"), steps=1, seq_len=8, batch_size=2,
                   backend="numpy", threads=1, gen=0, model=str(folder / "ck"))
    return folder / "ck"


def point_graph_at(checkpoint: Path, target: Path) -> None:
    """config.json edited so that its graph is the path `target`, not the document."""
    config = json.loads((checkpoint / "config.json").read_text(encoding="utf-8"))
    config["model"]["graph"] = str(target)
    (checkpoint / "config.json").write_text(json.dumps(config), encoding="utf-8")


def outside_files(outside: Path) -> list[Path]:
    """A graph document outside (of another width, d 40), a file that is no document, and no file at all."""
    (outside / "g.json").write_text(json.dumps({**DOCUMENT, "dims": {"d": 40}}), encoding="utf-8")
    (outside / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n", encoding="utf-8")
    return [outside / "g.json", outside / "passwd", outside / "missing.json"]


# ---- a checkpoint's graph is its own document ------------------------------------------------------------

def test_the_run_list_reads_no_graph_a_checkpoint_points_outside_to(client, workspace):
    point_graph_at(graph_checkpoint(workspace), outside_files(workspace.parent)[0])
    (workspace / "results.jsonl").unlink()  # a checkpoint copied in alone: its row's figures from config.json
    answer = client.get("/api/runs")
    assert answer.status_code == 200
    [row] = answer.json()["runs"]
    assert row["name"] == "ck" and row["model"] is None and row["parameters"] is None, row
    assert "d 40" not in answer.text  # the outside document's width, which it showed


def test_sampling_a_checkpoint_whose_graph_points_outside_says_one_line_whatever_is_there(client,
                                                                                           workspace):
    checkpoint = graph_checkpoint(workspace)
    said = set()
    for target in outside_files(workspace.parent):
        point_graph_at(checkpoint, target)
        events = [json.loads(line[len("data: "):]) for line in
                  client.get("/api/sample?checkpoint=ck&tokens=3").text.splitlines() if line.startswith("data: ")]
        assert len(events) == 1 and "error" in events[0], events
        said.add(events[0]["error"])
    assert len(said) == 1, said  # no existence oracle: the same line for a document, another file and none
    assert REFUSED in said.pop()


@pytest.mark.parametrize("command", [["export", "--format", "onnx", "--out", "OUT/m.onnx"], ["sample", "--tokens", "3"],
                                     ["eval", "--", "TEXT"]])
def test_the_cli_reads_no_graph_a_checkpoint_points_to(tmp_path, capsys, command):
    (tmp_path / "W").mkdir()
    (tmp_path / "W" / "tiny.txt").write_text("the cat sat on the mat\n" * 40, encoding="utf-8")
    checkpoint = graph_checkpoint(tmp_path / "W")
    capsys.readouterr()
    args = [part.replace("OUT", str(tmp_path)).replace("TEXT", str(tmp_path / "W" / "tiny.txt")) for part in command]
    said = set()
    for target in outside_files(tmp_path):
        point_graph_at(checkpoint, target)
        assert main([args[0], str(checkpoint), *args[1:]]) == 2
        captured = capsys.readouterr()
        assert len(captured.err.strip().splitlines()) == 1, captured.err
        said.add(captured.err)
    assert len(said) == 1, said
    assert REFUSED in said.pop()
    assert not (tmp_path / "m.onnx").exists()


def test_a_graph_document_in_the_config_still_loads(tmp_path):
    (tmp_path / "tiny.txt").write_text("the cat sat on the mat\n" * 40, encoding="utf-8")
    model = microgpt.load(str(graph_checkpoint(tmp_path)))
    assert model.model.config.graph["dims"] == {"d": 8}


# ---- a dataset's shards are read from the workspace alone ------------------------------------------------

@pytest.fixture
def linked_dataset(workspace):
    """workspace/prepared, a dataset whose training shards are links to files outside, and a checkpoint ck
    trained on it before they were moved out."""
    text = (workspace / "tiny.txt").read_text(encoding="utf-8")
    dataset = write_dataset(workspace / "prepared", text, held_out=200, shard_tokens=2000)
    microgpt.train(str(dataset), steps=1, d_model=8, n_layers=1, seq_len=8, batch_size=2, backend="numpy",
                   threads=1, gen=0, model=str(workspace / "ck"))
    for shard in sorted(dataset.glob("train-*.bin")):
        moved = workspace.parent / shard.name
        shard.rename(moved)
        shard.symlink_to(moved)
    return dataset


def test_a_dataset_whose_shards_link_outside_is_scored_by_no_route(client, workspace, linked_dataset):
    rows = {row["name"]: row for row in client.get("/api/runs").json()["runs"]}
    assert "prepared" not in rows  # a dataset is no run, damaged or not; the route that reads it says why not
    first = min(linked_dataset.glob("train-*.bin"))
    assert one_line_error(client.post("/api/eval", json={"checkpoint": "ck", "file": "prepared",
                                                         "backend": "numpy"}), 403) == (
        f"prepared/{first.name} links to {first.resolve()}, outside the workspace, so prepared is not read; "
        "remove the link")


def test_a_dataset_whose_shards_link_outside_is_checked_and_trained_by_no_route(client, studio, workspace,
                                                                                linked_dataset):
    run = lookahead_run()
    run["settings"]["file"] = "prepared"
    errors = client.post("/api/graph/check", json=check_body(run)).json()["errors"]
    assert errors and "outside the workspace" in errors[0]["message"], errors
    (workspace / "studio.yaml").write_text("runs:\n  d: {file: prepared, steps: 1, d_model: 8, n_layers: 1, "
                                           "seq_len: 8, batch_size: 2, backend: numpy, threads: 1}\n",
                                           encoding="utf-8")
    assert "outside the workspace" in one_line_error(client.post("/api/runs/d/start"), 403)
    assert "d" not in studio.manager.runs


# ---- a resume reads the text its checkpoint names --------------------------------------------------------

def test_a_resume_reads_no_text_the_checkpoint_names_outside(client, studio, workspace):
    microgpt.train(str(workspace / "tiny.txt"), steps=1, d_model=8, n_layers=1, seq_len=8, batch_size=2,
                   backend="numpy", threads=1, gen=0, model=str(workspace / "checkpoints" / "r"))
    (workspace / "studio.yaml").write_text("runs:\n  r: {file: tiny.txt, steps: 2, d_model: 8, n_layers: 1, "
                                           "seq_len: 8, batch_size: 2, backend: numpy, threads: 1, gen: 0}\n",
                                           encoding="utf-8")
    outside = workspace.parent / "secret.txt"  # a text a resume would train on, over the run's own file
    outside.write_text((workspace / "tiny.txt").read_text(encoding="utf-8"), encoding="utf-8")
    state_file = workspace / "checkpoints" / "r" / "train_state.json"
    state = json.loads(state_file.read_text(encoding="utf-8"))
    state["corpus_file"] = str(outside)
    state_file.write_text(json.dumps(state), encoding="utf-8")
    said = one_line_error(client.post("/api/runs/r/resume"), 403)
    assert "checkpoints/r/train_state.json" in said and "outside the workspace" in said, said
    assert "r" not in studio.manager.runs
