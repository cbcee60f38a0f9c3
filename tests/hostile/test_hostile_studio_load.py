"""One request or one planted file must not freeze the studio (issue 52 C): a malformed graph document is one
line; half a billion heads are refused from the number, in a process that could not hold them; a FIFO planted
as a checkpoint's file never holds the run list; and the page answers while a graph request works."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from extras import need

need("starlette")
need("httpx")

from folder_files import fake_checkpoint
from microgpt.model.family import family
from microgpt.model.graph.from_family import document_for
from studio_server import one_line_error

WAIT_S = 60  # a request that has not answered by then hangs
GPT = family("gpt").Config(vocab_size=65, d_model=12, n_layers=1, head_dims=(4, 4, 4), d_ff=24, seq_len=16)


def answered(request, *args, **kwargs):
    """The answer of client.request(...) made on a thread, or None where it has not come within WAIT_S."""
    got = []
    thread = threading.Thread(target=lambda: got.append(request(*args, **kwargs)), daemon=True)
    thread.start()
    thread.join(WAIT_S)
    return got[0] if got else None


# ---- malformed documents: one line, never a 500 --------------------------------------------------------

def gpt_document() -> dict:
    return document_for("gpt", GPT)


def op_an_object(document: dict) -> None:
    document["nodes"][2]["op"] = {"name": "layer_norm"}


def group_a_list(document: dict) -> None:
    document["nodes"][1]["group"] = ["transformer_block"]


def groups_nested_3000_deep(document: dict) -> None:
    layer = {"params": {"d": None}, "inputs": {"x": "stream[d]"}, "outputs": {"x": "stream[d]"}}
    document["groups"] = {"g0": {**layer, "nodes": [], "edges": [{"from": "x", "to": "x"}]}}
    for i in range(1, 3000):
        document["groups"][f"g{i}"] = {**layer, "nodes": [{"id": "inner", "group": f"g{i - 1}"}],
                                       "edges": [{"from": "x", "to": "inner.x"}, {"from": "inner.x", "to": "x"}]}
    document["nodes"][1] = {"id": "blocks", "group": "g2999"}


# (the change, the words of its one line, whether it is refused whole: a document of the wrong shape is neither
# laid out nor kept; one nested too deep is well formed, so it is laid out as it is and saved only as a draft)
MALFORMED = [(op_an_object, "final_norm: op must be a name", True),
             (group_a_list, "blocks: group must be a name", True),
             (groups_nested_3000_deep, "groups nest deeper than 32", False)]


@pytest.mark.parametrize(("change", "words", "unlaid"), MALFORMED, ids=[change.__name__ for change, *_ in MALFORMED])
def test_a_malformed_document_is_one_line_on_every_graph_route(change, words, unlaid, client, workspace):
    """Each was a 500 (TypeError: unhashable type, RecursionError) on check, layout or save."""
    document = gpt_document()
    change(document)
    checked = client.post("/api/graph/check", json={"document": document, "settings": {"file": "tiny.txt"}})
    assert checked.status_code == 200 and checked.json()["ok"] is False
    assert [words in error["message"] for error in checked.json()["errors"]] == [True]
    laid = client.post("/api/graph/layout", json={"document": document})
    assert words in one_line_error(laid, 400) if unlaid else laid.status_code == 200
    saved = client.post("/api/save", json={"name": "bad", "document": document, "settings": {"file": "tiny.txt"}})
    assert saved.status_code == (400 if unlaid else 200)
    assert any(words in error["message"] for error in saved.json()["errors"])
    drafts = sorted(path.name for path in (workspace / "studio" / "drafts").glob("*"))
    assert drafts == ([] if unlaid else ["bad.json"])
    runs = workspace / "studio.yaml"  # never a run that could be trained
    assert not runs.exists() or "bad" not in runs.read_text(encoding="utf-8")


# ---- sizes refused from the numbers, before anything is made -------------------------------------------

CHILD = """
import json, resource, sys
from starlette.testclient import TestClient
from microgpt.studio.app import Studio
from microgpt.studio.workspace import Workspace

client = TestClient(Studio(Workspace(sys.argv[1]), "t", "127.0.0.1", 8765).app, base_url="http://127.0.0.1:8765",
                    headers={"X-Studio-Token": "t"}, raise_server_exceptions=False)
client.get("/api/graph/palette")  # the libraries loaded before the limit
used = int(next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmSize:"))) * 1024
resource.setrlimit(resource.RLIMIT_AS, (used + 2**30, used + 2**30))  # 1 GiB more; 2^29 heads are 4 GiB
request = json.loads(sys.argv[2])
answer = client.request(request["method"], request["url"], json=request.get("json"))
print(json.dumps({"status": answer.status_code, "body": answer.json()}))
"""


def in_a_child_held_to_one_more_gib(workspace: Path, method: str, url: str, body=None) -> dict:
    """The answer to one request of a studio on `workspace`, in a process that may take 1 GiB more than its
    libraries (so that a 4 GiB tuple of head widths fails it)."""
    done = subprocess.run([sys.executable, "-c", CHILD, str(workspace), json.dumps({"method": method, "url": url,
                                                                                   "json": body})],
                          capture_output=True, text=True, check=False, timeout=300,
                          env={**os.environ, "OPENBLAS_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_half_a_billion_heads_from_a_family_are_refused_from_the_number(workspace):
    """2^29 heads: the route held every other for about 200 s and took the server to 11.3 GB."""
    answer = in_a_child_held_to_one_more_gib(workspace, "POST", "/api/graph/from-family", {
        "family": "gpt", "settings": {"d_model": 2**29, "heads": 2**29}})
    assert answer["status"] == 200 and answer["body"]["document"] is None
    # the studio shows the message on the heads field, so it is worded without the flag
    assert [(error["setting"], error["message"]) for error in answer["body"]["errors"]] == [
        ("heads", "536,870,912 heads is more than 4,096; give fewer, wider heads")]


def test_half_a_billion_heads_in_a_document_are_refused_from_the_number(workspace):
    document = gpt_document()
    document["dims"].update(d=2**30, heads=2**29)
    answer = in_a_child_held_to_one_more_gib(workspace, "POST", "/api/graph/check", {
        "document": document, "settings": {"file": "tiny.txt"}})
    assert answer["status"] == 200 and answer["body"]["ok"] is False
    assert "param heads gives 536,870,912 heads, more than 4,096" in answer["body"]["errors"][0]["message"]


def test_a_checkpoint_of_half_a_billion_heads_is_listed_without_making_them(workspace):
    """Its graph (d 2^30, heads 2^29) held every /api/runs for 8 s and added 4 GB."""
    document = gpt_document()
    document["dims"].update(d=2**30, heads=2**29)
    fake_checkpoint(workspace / "checkpoints" / "huge", {"format_version": 2, "family": "graph", "model": {
        "graph": document, "seq_len": 16, "vocab_size": 65}, "tokenizer": {"kind": "char", "vocab": "ab"}})
    answer = in_a_child_held_to_one_more_gib(workspace, "GET", "/api/runs")
    assert answer["status"] == 200
    [row] = answer["body"]["runs"]
    assert row["name"] == "huge" and row["parameters"] is None  # its figures do not read; the list does


# ---- a FIFO planted as a checkpoint's file -------------------------------------------------------------

def fifo(path: Path) -> Path:
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    return path


def release(path: Path) -> None:
    """A writer opened and closed on the FIFO, so that a reader blocked in opening it goes on (and ends)."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:  # no reader is waiting
        pass


@pytest.mark.parametrize("planted", ["config.json", "train_state.json"])
def test_a_fifo_planted_in_a_checkpoint_never_holds_the_run_list(planted, workspace, client):
    """A FIFO as checkpoints/x/config.json held /api/runs forever."""
    checkpoint = fake_checkpoint(workspace / "checkpoints" / "run", {"format_version": 2})
    (checkpoint / "train_state.json").write_text(json.dumps({"step": 1, "train_config": {"steps": 2}}))
    planted_at = fifo(checkpoint / planted)
    try:
        answer = answered(client.get, "/api/runs")
        assert answer is not None, "/api/runs did not answer"
        assert answer.status_code == 200
        rows = answer.json()["runs"]
        assert [row["name"] for row in rows] in ([], ["run"])  # a FIFO config.json: no run, or a damaged one
        assert planted != "config.json" or all(row["damaged"] for row in rows)
    finally:
        release(planted_at)


def test_a_fifo_as_a_metrics_log_is_one_line_on_every_reader(workspace, client):
    checkpoint = fake_checkpoint(workspace / "checkpoints" / "run", {"format_version": 2})
    log = fifo(checkpoint.parent / "run.metrics.jsonl")
    try:
        for url in ("/api/metrics?run=checkpoints/run", "/api/csv?run=checkpoints/run"):
            answer = answered(client.get, url)
            assert answer is not None, f"{url} did not answer"
            assert one_line_error(answer, 400)
    finally:
        release(log)


# ---- the page answers while graph work runs ------------------------------------------------------------

BLOCKED = [("/api/graph/from-family", "from_family_request", {"family": "gpt"}),
           ("/api/graph/layout", "layout_request", {"document": {}}),
           ("/api/graph/check", "check_request", {"document": {}}),
           ("/api/save", "save_run", {"name": "x", "document": {}})]


class Checked:
    """What a check gives back (GraphCheck), as little as the route reads of it."""

    def as_json(self) -> dict:
        return {"ok": True}


@pytest.mark.parametrize(("url", "work", "body"), BLOCKED, ids=[url for url, _, _ in BLOCKED])
def test_the_page_answers_while_a_graph_request_works(url, work, body, client, monkeypatch):
    """The work of a graph request runs off the event loop: a from-family of 2^29 heads left `/` and every
    route dead for about 200 s."""
    started, go_on = threading.Event(), threading.Event()

    def slow(*args):
        started.set()
        go_on.wait(WAIT_S)
        return {"layout_request": {"layout": None},
                "from_family_request": {"document": None, "layout": None, "errors": []},
                "save_run": {"saved": "x"}}.get(work, Checked())

    monkeypatch.setattr(f"microgpt.studio.app.{work}", slow)
    worker = threading.Thread(target=client.post, args=(url,), kwargs={"json": body}, daemon=True)
    worker.start()
    try:
        assert started.wait(WAIT_S), f"{url} never reached its work"
        page = answered(client.get, "/")
        assert page is not None and page.status_code == 200, f"/ did not answer while {url} worked"
    finally:
        go_on.set()
        worker.join(WAIT_S)


def test_the_run_list_reads_off_the_event_loop(studio, client, monkeypatch):
    started, go_on = threading.Event(), threading.Event()

    def slow_runs():
        started.set()
        go_on.wait(WAIT_S)
        return []

    monkeypatch.setattr(studio.workspace, "runs", slow_runs)
    worker = threading.Thread(target=client.get, args=("/api/runs",), daemon=True)
    worker.start()
    try:
        assert started.wait(WAIT_S)
        page = answered(client.get, "/")
        assert page is not None and page.status_code == 200, "/ did not answer while /api/runs read"
    finally:
        go_on.set()
        worker.join(WAIT_S)
