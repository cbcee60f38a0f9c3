"""The studio's bounds (issue 52 items 4 and 6): the causality check of the node editor runs in a worker process
held to a time and a memory budget (it ran in a thread nothing could stop), and past either the check says so and
the worker is gone, while every other route answers; a layout places at most as many nodes as a graph may flatten
to primitives (graph_save.MAX_LAYOUT_ENTRIES was 200,000, the primitives' old limit, against today's 20,000), and
the layout file read back is held to the bytes such a layout needs. The budgets are made small here, so that a
graph of a few seconds' check passes them; nothing is timed."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from extras import need

need("starlette")

from microgpt.model.graph.compile import MAX_NODES
from microgpt.studio import graph_verdicts
from microgpt.studio.graph_save import MAX_LAYOUT_BYTES, MAX_LAYOUT_ENTRIES, _layout_file, check_layout
from microgpt.studio.workspace import Workspace

WAIT_S = 120  # only a limit for a hang: a loaded machine takes longer, never fails for it
SETTINGS = {"file": "tiny.txt", "seq_len": 8, "batch_size": 2}


def gpt(blocks: int, d: int = 16) -> dict:
    """gpt's graph of `blocks` blocks of d columns (1,000 blocks: a check of seconds; d 256: about 300 MB)."""
    return {"microgpt_graph": 1, "dims": {"d": d, "d_ff": 2 * d, "heads": 2},
            "nodes": [{"id": "tok_emb", "op": "embedding"},
                      {"id": "blocks", "group": "transformer_block", "repeat": blocks},
                      {"id": "final_norm", "op": "layer_norm"}, {"id": "head", "op": "logits"},
                      {"id": "loss", "op": "cross_entropy"}],
            "edges": [{"from": "tokens", "to": "tok_emb.ids"}, {"from": "tok_emb.out", "to": "blocks.x"},
                      {"from": "blocks.x", "to": "final_norm.x"}, {"from": "final_norm.out", "to": "head.x"},
                      {"from": "head.out", "to": "loss.logits"}, {"from": "head.out", "to": "logits"}]}


def verdict(client, document: dict) -> dict:
    """The causality verdict of a check of `document`, asked again while it is pending, the page answering /
    meanwhile each time."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        answer = client.post("/api/graph/check", json={"document": document, "settings": SETTINGS})
        assert answer.status_code == 200, answer.text
        if not answer.json()["causality"]["pending"]:
            return answer.json()["causality"]
        assert client.get("/").status_code == 200  # the studio answers while the check works
        time.sleep(0.2)
    raise AssertionError(f"no verdict within {WAIT_S} s")


@pytest.mark.parametrize(("budget", "document", "said"), [
    ({"VERDICT_TIME_S": 0.5}, gpt(1000), "this graph took longer than 0.5 s to check, the studio's budget"),
    ({"VERDICT_MEMORY": 64 * 2**20}, gpt(8, d=256), "this graph needs more than 64.0 MiB of memory to check")])
def test_a_causality_check_past_its_budget_is_stopped_and_said(client, monkeypatch, budget, document, said):
    for name, value in budget.items():
        monkeypatch.setattr(graph_verdicts, name, value)
    result = verdict(client, document)
    assert result["ok"] is None and said in result["message"], result  # it ran on, in a thread nothing stopped
    assert "microgpt train checks it before its first step" in result["message"]
    assert graph_verdicts._worker.process is None  # stopped, nothing left running
    monkeypatch.undo()  # the usual budget: the next check starts a worker again, and its verdict comes
    assert verdict(client, gpt(2))["ok"] is True


def test_a_resume_onto_a_train_state_planted_as_a_fifo_holds_nothing(client, workspace):
    """A resume reads the checkpoint's train_state.json for the text it names: it opened a FIFO planted there
    and waited for a writer, on the event loop, so the studio answered nothing again."""
    import microgpt

    (workspace / "studio.yaml").write_text("runs:\n  r: {file: tiny.txt, steps: 2, d_model: 8, n_layers: 1, "
                                           "seq_len: 8, batch_size: 2, backend: numpy, threads: 1}\n",
                                           encoding="utf-8")
    microgpt.train(str(workspace / "tiny.txt"), steps=1, d_model=8, n_layers=1, seq_len=8, batch_size=2,
                   backend="numpy", threads=1, gen=0, model=str(workspace / "checkpoints" / "r"))
    fifo = workspace / "checkpoints" / "r" / "train_state.json"
    fifo.unlink()
    os.mkfifo(fifo)
    answers = []
    resuming = threading.Thread(target=lambda: answers.append(client.post("/api/runs/r/resume")), daemon=True)
    resuming.start()
    try:
        resuming.join(WAIT_S)
        assert answers, "the resume waited on the FIFO"
        assert answers[0].status_code in (200, 400), answers[0].text  # the resume itself says what is wrong
    finally:
        if not answers:  # release the reader the old code left waiting
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


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
