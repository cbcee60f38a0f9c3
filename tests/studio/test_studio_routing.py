"""The studio's `/api/routing` (the colours of the Sample view): an ensemble checkpoint's routing of a text from
a subprocess, as `LoadedModel.routing` gives it; none for another family; a checkpoint outside the workspace,
a text too long or with a NUL, refused in one line."""

from __future__ import annotations

import numpy as np
import pytest

from extras import need

need("starlette")
need("httpx")

from starlette.testclient import TestClient

from microgpt.cli import main
from microgpt.studio.app import Studio
from microgpt.studio.routing import MAX_ROUTED_CHARACTERS
from microgpt.studio.workspace import Workspace
from microgpt.use.loaded import load
from studio_workspace import make_workspace

TOKEN, PORT = "test-token", 8765
FLAGS = ["--seq-len", "16", "--steps", "2", "--backend", "numpy", "--threads", "1", "--quiet", "--gen", "0",
         "--val-tokens", "0"]


@pytest.fixture
def client(tmp_path, monkeypatch):
    workspace = make_workspace(tmp_path)
    monkeypatch.chdir(workspace)
    assert main(["train", "tiny.txt", "--cooperative", "d8n1,d4n1", "--stream-dim", "8", "--prior", "bigram",
                 *FLAGS, "--model", "checkpoints/ens"]) == 0
    assert main(["train", "tiny.txt", "--d-model", "8", "--n-layers", "1", "--heads", "1", *FLAGS,
                 "--model", "checkpoints/gpt"]) == 0
    studio = Studio(Workspace(workspace), TOKEN, "127.0.0.1", PORT)
    yield TestClient(studio.app, base_url=f"http://127.0.0.1:{PORT}", headers={"X-Studio-Token": TOKEN})
    studio.manager.stop_all()


def test_the_routing_of_a_sample_and_what_is_refused(client, tmp_path):
    text = "the cat sat on the mat and the dog"  # past seq_len 16: windows up to each position
    answer = client.post("/api/routing", json={"checkpoint": "checkpoints/ens", "text": text, "backend": "numpy"})
    assert answer.status_code == 200, answer.text
    routing = answer.json()["routing"]
    assert "".join(routing["tokens"]) == text and routing["experts"] == ["expert 1", "expert 2"]
    assert routing["prior_kind"] == "bigram" and len(routing["prior"]) == len(text)
    expected = load(tmp_path / "checkpoints" / "ens", backend="numpy").routing(text)
    np.testing.assert_allclose(routing["weights"], expected.weights, rtol=0, atol=1e-6)  # JSON keeps 6 decimals
    assert routing["dominant"] == expected.dominant.tolist()
    other = client.post("/api/routing", json={"checkpoint": "checkpoints/gpt", "text": text, "backend": "numpy"})
    assert other.status_code == 200 and other.json() == {"routing": None}
    assert client.post("/api/routing", json={"checkpoint": "../outside", "text": text}).status_code == 403
    for body, words in (({"text": "a" * (MAX_ROUTED_CHARACTERS + 1)}, "the studio routes at most"),
                        ({"text": "a\0b"}, "without NUL characters"), ({"text": ""}, "give the text to route"),
                        ({"text": "x", "backend": "gpu9"}, "backend must be")):
        refused = client.post("/api/routing", json={"checkpoint": "checkpoints/ens", **body})
        assert refused.status_code == 400 and words in refused.json()["error"], refused.text
        assert "\n" not in refused.json()["error"]
