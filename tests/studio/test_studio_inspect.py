"""The studio's `/api/inspect` (the Sample view's Inspect panel): a checkpoint's paths, and for a prompt the node's
activations, an attention node's maps, the logit lens and every head's ablation score, from a subprocess running
the same code as `microgpt inspect`; a bad path or prompt, refused in one line."""

from __future__ import annotations

import base64

import pytest

from extras import need

need("starlette")
need("httpx")
need("matplotlib")

from starlette.testclient import TestClient

from microgpt.cli import main
from microgpt.studio.app import Studio
from microgpt.studio.workspace import Workspace
from microgpt.use.loaded import load
from studio_workspace import make_workspace

TOKEN, PORT = "test-token", 8765
FLAGS = ["--seq-len", "16", "--steps", "2", "--backend", "numpy", "--threads", "1", "--quiet", "--gen", "0",
         "--val-tokens", "0"]
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def client(tmp_path, monkeypatch):
    workspace = make_workspace(tmp_path)
    monkeypatch.chdir(workspace)
    assert main(["train", "tiny.txt", "--d-model", "8", "--n-layers", "2", "--heads", "2,6", *FLAGS,
                 "--model", "checkpoints/gpt"]) == 0
    studio = Studio(Workspace(workspace), TOKEN, "127.0.0.1", PORT)
    yield TestClient(studio.app, base_url=f"http://127.0.0.1:{PORT}", headers={"X-Studio-Token": TOKEN})
    studio.manager.stop_all()


def test_a_node_and_a_prompt_give_the_clis_figures_and_the_head_scores(client, tmp_path):
    answer = client.post("/api/inspect", json={"checkpoint": "checkpoints/gpt", "backend": "numpy",
                                               "text": "the cat sat", "node": "blocks.1.attn.heads"})
    assert answer.status_code == 200, answer.text
    found = answer.json()
    assert ["blocks.1.attn.heads", 8] in found["paths"] and found["attention"] == ["blocks.0.attn.heads",
                                                                                   "blocks.1.attn.heads"]
    assert found["node"] == "blocks.1.attn.heads" and "".join(found["tokens"]) == "the cat sat"
    assert set(found["figures"]) == {"lens", "activations", "attention"}
    assert all(base64.b64decode(data)[:8] == PNG for data in found["figures"].values())
    model = load(tmp_path / "checkpoints" / "gpt", backend="numpy")
    assert found["heads"]["clean"] == pytest.approx(model.loss("the cat sat"), abs=1e-9)
    ranked = found["heads"]["ranked"]
    assert sorted(path for path, *_ in ranked) == [f"blocks.{i}.attn.heads[{h}]" for i in range(2) for h in range(2)]
    assert ranked[0][3] == pytest.approx(model.loss("the cat sat", ablate=[ranked[0][0]]) - model.loss("the cat sat"),
                                         abs=1e-9)
    plain = client.post("/api/inspect", json={"checkpoint": "checkpoints/gpt", "backend": "numpy", "text": "the",
                                              "node": "blocks.0.ff.l1"}).json()
    assert set(plain["figures"]) == {"lens", "activations"}  # no maps for a node that is not attention
    paths_only = client.post("/api/inspect", json={"checkpoint": "checkpoints/gpt", "backend": "numpy"}).json()
    assert set(paths_only) == {"paths", "attention"}


def test_a_bad_node_or_prompt_is_one_line(client):
    for body, words in (({"text": "the", "node": "blocks.0.attn.head"}, "did you mean blocks.0.attn.heads"),
                        ({"text": "a\0b"}, "without NUL characters"), ({"text": "the", "node": 3}, "as its path"),
                        ({"text": "the", "backend": "gpu9"}, "backend must be")):
        refused = client.post("/api/inspect", json={"checkpoint": "checkpoints/gpt", "backend": "numpy", **body})
        assert refused.status_code == 400 and words in refused.json()["error"], refused.text
        assert "\n" not in refused.json()["error"]
    assert client.post("/api/inspect", json={"checkpoint": "../outside", "text": "the"}).status_code == 403
