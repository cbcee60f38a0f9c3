"""The studio keeps to its workspace and answers every bad request with one line (issue 34): path settings
that point out, files a request reads through links or beside the workspace, symlinked state directories,
cross-port pages and framing, bodies and samples past their caps, damaged checkpoints in the run list, and
the requests that used to answer 500 with a traceback."""

from __future__ import annotations

import errno
import json
import os
import signal
from pathlib import Path

import pytest

from extras import need

need("starlette")
need("httpx")

import threading

import httpx
from starlette.testclient import TestClient

import microgpt
from microgpt.studio.app import MAX_MODEL_PROCESSES, MAX_SAMPLE_TOKENS, Studio
from microgpt.studio.guard import MAX_BODY_BYTES
from microgpt.studio.workspace import Workspace, WorkspaceError
from studio_server import PORT, TOKEN, logged_steps, one_line_error, saved_step, start_studio
from studio_workspace import check_body, ensemble_run, lookahead_run
from waiting import alive, wait_for

# ---- a run cannot write outside the workspace ------------------------------------------------------------

@pytest.mark.parametrize("key", ["model", "file"])
def test_a_path_setting_that_points_out_of_the_workspace_is_refused_on_save(client, workspace, key):
    (workspace.parent / "escaped").write_text("a text outside the workspace\n" * 50, encoding="utf-8")
    for outside in (str(workspace.parent / "escaped"), "../escaped"):
        run = lookahead_run()
        run["settings"][key] = outside
        answer = client.post("/api/save", json={"name": "out", **run})
        assert answer.status_code == 400, outside
        assert any("outside the workspace" in error["message"] for error in answer.json()["errors"])
        assert not (workspace / "studio.yaml").exists() and not (workspace / "studio" / "drafts").exists()


def test_a_named_run_edited_to_write_outside_is_refused_at_start(client, workspace):
    assert client.post("/api/save", json={"name": "ok", **lookahead_run(steps=2)}).status_code == 200
    text = (workspace / "studio.yaml").read_text(encoding="utf-8")
    (workspace / "studio.yaml").write_text(text.replace("  ok:\n", f"  ok:\n    model: {workspace.parent}/escaped\n"),
                                           encoding="utf-8")
    message = one_line_error(client.post("/api/runs/ok/start", json={}), 403)
    assert "--model" in message and "outside the workspace" in message
    assert not (workspace.parent / "escaped").exists() and not list(workspace.parent.glob(".escaped*"))



def test_a_named_run_edited_to_read_a_graph_outside_is_refused_at_start(client, workspace):
    """--graph is a path like --file: a run started from the studio reads no document outside the workspace."""
    (workspace.parent / "outside.json").write_text('{"microgpt_graph": 1}', encoding="utf-8")
    assert client.post("/api/save", json={"name": "ok", **lookahead_run(steps=2)}).status_code == 200
    text = (workspace / "studio.yaml").read_text(encoding="utf-8")
    (workspace / "studio.yaml").write_text(text.replace("  ok:\n", f"  ok:\n    graph: {workspace.parent}/outside.json\n"),
                                           encoding="utf-8")
    message = one_line_error(client.post("/api/runs/ok/start", json={}), 403)
    assert "--graph" in message and "outside the workspace" in message


# ---- no read outside the workspace -----------------------------------------------------------------------

def test_a_metrics_log_linked_out_of_the_workspace_is_not_served(client, workspace):
    secret = workspace.parent / "secret.metrics.jsonl"
    secret.write_text('{"step": 1, "loss": 0.5, "time": 1.0}\n', encoding="utf-8")
    (workspace / "evil.metrics.jsonl").symlink_to(secret)
    for path in ("/api/metrics?run=evil", "/api/csv?run=evil", "/api/stream?run=evil"):
        assert "outside the workspace" in one_line_error(client.get(path), 403), path


@pytest.mark.parametrize("run", [".", "checkpoints/..", ""])
def test_the_workspace_itself_is_not_a_run(client, workspace, run):
    (workspace.parent / "W.metrics.jsonl").write_text('{"step": 1, "loss": 0.5, "time": 1.0}\n', encoding="utf-8")
    (workspace / "checkpoints").mkdir()
    for path in (f"/api/metrics?run={run}", f"/api/csv?run={run}"):
        assert client.get(path).status_code in (400, 403), path


# ---- the studio's own directories are real ones ----------------------------------------------------------

@pytest.mark.parametrize("name", [".studio", "checkpoints"])
def test_a_workspace_whose_state_directory_is_a_symlink_is_refused(workspace, name):
    elsewhere = workspace.parent / "elsewhere"
    elsewhere.mkdir()
    (workspace / name).symlink_to(elsewhere)
    with pytest.raises(WorkspaceError, match="symlink"):
        Workspace(workspace)


# ---- cross-port pages and framing ------------------------------------------------------------------------

def test_no_cookie_carries_the_token_and_a_cookie_opens_no_api_call(studio):
    """Cookies are not kept apart by port: any server on another port of 127.0.0.1 would be sent one."""
    bare = TestClient(studio.app, base_url=f"http://127.0.0.1:{PORT}")
    page = bare.get(f"/?token={TOKEN}")
    assert page.status_code == 200 and "set-cookie" not in page.headers and TOKEN not in page.text
    bare.cookies.set(f"microgpt_studio_{PORT}", TOKEN)  # as an older studio set it
    for path in ("/api/runs", "/api/sample?checkpoint=x", "/api/graph/settings"):
        assert bare.get(path).status_code == 401, path
    assert bare.get("/api/runs", headers={"X-Studio-Token": TOKEN}).status_code == 200


def test_a_same_site_page_of_another_port_is_refused_and_nothing_can_be_framed(client):
    assert client.get("/api/runs", headers={"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "cors"}).status_code == 403
    page = client.get(f"/?token={TOKEN}")
    assert page.headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert client.get("/api/nothing-here").headers["x-frame-options"] == "DENY"


# ---- limits ----------------------------------------------------------------------------------------------

def test_a_body_over_the_cap_is_refused_without_being_read_whole(client):
    big = b'{"document": "' + b"x" * (MAX_BODY_BYTES + 10) + b'"}'
    assert "over" in one_line_error(client.post("/api/graph/check", content=big), 413)

    def chunks():  # no Content-Length: counted as it comes
        yield b'{"document": "'
        for _ in range(MAX_BODY_BYTES // 65536 + 2):
            yield b"x" * 65536
        yield b'"}'

    assert "over" in one_line_error(client.post("/api/graph/check", content=chunks()), 400)


def test_samples_are_capped_in_length_and_in_number(client, studio, workspace):
    microgpt.train(str(workspace / "tiny.txt"), steps=2, d_model=8, n_layers=1, seq_len=8, batch_size=2,
                   backend="numpy", threads=1, gen=0, model=str(workspace / "ck"))
    long = client.get(f"/api/sample?checkpoint=ck&tokens={MAX_SAMPLE_TOKENS + 1}")
    assert f"at most {MAX_SAMPLE_TOKENS:,}" in one_line_error(long, 400)
    studio.model_processes = MAX_MODEL_PROCESSES  # as if that many were running
    assert "running already" in one_line_error(client.get("/api/sample?checkpoint=ck&tokens=5"), 429)
    assert "running already" in one_line_error(client.post("/api/eval", json={"checkpoint": "ck", "file": "tiny.txt"}),
                                               429)
    studio.model_processes = 0
    answer = client.get("/api/sample?checkpoint=ck&tokens=5&temperature=0")
    assert answer.status_code == 200 and '"done": true' in answer.text
    assert studio.model_processes == 0  # the slot is given back when the stream ends


# ---- no traceback: one line, status 400 ------------------------------------------------------------------

def test_a_data_file_that_does_not_exist_is_an_error_on_the_data_setting(client):
    run = ensemble_run()
    run["settings"]["file"] = "tin"  # half typed
    checked = client.post("/api/graph/check", json=check_body(run)).json()
    assert checked["ok"] is False and checked["errors"][0]["setting"] == "file"
    assert "no such file" in checked["errors"][0]["message"]
    run["settings"]["file"] = "x" * 300  # ENAMETOOLONG
    assert client.post("/api/graph/check", json=check_body(run)).json()["errors"][0]["setting"] == "file"


@pytest.mark.parametrize("query", ["points=abc", "points=1e3", "points=-5"])
def test_a_bad_points_count_is_one_line(client, query):
    assert "points" in one_line_error(client.get(f"/api/metrics?run=x&{query}"), 400)


@pytest.mark.parametrize("cursor", ["x|abc|1", "x|1|abc", "x|-1|"])
def test_a_malformed_stream_cursor_is_one_line(client, cursor):
    assert "cursor" in one_line_error(client.get("/api/stream", params={"run": cursor}), 400)


@pytest.mark.parametrize("draft", [
    {"family": "gpt", "settings": "x"}, {"family": ["gpt"], "settings": {}}, {"family": {"a": 1}},
    {"family": "gpt", "settings": {"d_model": [1]}}, {"family": "gpt", "settings": {"nothing": 1}},
    {"family": "gpt", "settings": {}, "document": "x"}, {"family": "gpt", "settings": {}, "document": {"nodes": "n1"}},
    {"family": "gpt", "settings": {}, "document": {"microgpt_graph": 1, "nodes": [{"id": ["n1"]}]}},
    {"family": "gpt", "settings": {}, "document": None, "layout": "x"}, {"document": [1]}, {"document": {}},
    {"family": "graph", "settings": {}, "document": {"microgpt_graph": 1}},
])
def test_a_draft_of_the_wrong_shape_is_one_line(client, workspace, draft):
    for answer in (client.post("/api/graph/check", json=draft), client.post("/api/save", json={"name": "g", **draft})):
        assert answer.status_code in (200, 400)
        body = answer.json()
        errors = body.get("errors") or ([{"message": body["error"]}] if "error" in body else [])
        assert all(isinstance(e["message"], str) and "\n" not in e["message"] for e in errors)
    assert answer.status_code == 400, "nothing of the wrong shape is saved"
    assert not (workspace / "studio" / "drafts").exists(), "not even as a draft"


def test_a_nul_byte_in_a_prompt_and_a_bad_extra_value_are_one_line(client, workspace):
    microgpt.train(str(workspace / "tiny.txt"), steps=2, d_model=8, n_layers=1, seq_len=8, batch_size=2,
                   backend="numpy", threads=1, gen=0, model=str(workspace / "ck"))
    assert "NUL" in one_line_error(client.get("/api/sample", params={"checkpoint": "ck", "prompt": "a\0b"}), 400)
    run = lookahead_run()
    run["settings"]["max_corpus"] = "abc"
    checked = client.post("/api/graph/check", json=check_body(run)).json()
    assert checked["ok"] is False and checked["errors"][0]["setting"] == "max_corpus"
    assert checked["errors"][0]["message"].startswith("max_corpus must be a memory size")  # its field


def test_a_full_disk_on_save_is_one_line(client, monkeypatch):
    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(self))

    monkeypatch.setattr(Path, "write_text", full)
    message = one_line_error(client.post("/api/save", json={"name": "full", **lookahead_run()}), 400)
    assert "No space left on device" in message


def test_an_unexpected_failure_is_one_line_and_no_traceback(client, studio, monkeypatch, capsys):
    def broken():
        raise RuntimeError("something\nunexpected")

    monkeypatch.setattr(studio.workspace, "runs", broken)
    message = one_line_error(client.get("/api/runs"), 500)
    assert "RuntimeError: something unexpected" in message
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") <= 1


# ---- one damaged checkpoint does not hide the others -----------------------------------------------------

@pytest.mark.parametrize("damage", [
    ("config.json", "[" * 100_000 + "]" * 100_000),
    ("train_state.json", None),  # steps: "many"
    ("train_state.json", json.dumps({"step": 2, "train_config": "x"})),
])
def test_a_damaged_checkpoint_is_a_marked_row_not_a_failed_list(client, workspace, damage):
    for name in ("good", "bad"):
        microgpt.train(str(workspace / "tiny.txt"), steps=2, d_model=8, n_layers=1, seq_len=8, batch_size=2,
                       backend="numpy", threads=1, gen=0, model=str(workspace / name))
    file, text = damage
    if text is None:
        state = json.loads((workspace / "bad" / file).read_text(encoding="utf-8"))
        state["train_config"]["steps"] = "many"
        text = json.dumps(state)
    (workspace / "bad" / file).write_text(text, encoding="utf-8")
    rows = {row["name"]: row for row in client.get("/api/runs").json()["runs"]}
    assert rows["good"]["step"] == 2 and not rows["good"].get("damaged")
    assert "bad" not in rows or rows["bad"].get("damaged") or rows["bad"]["steps"] is None


# ---- lifecycle: a closed terminal, a killed studio, Ctrl-C with streams open -----------------------------

def studio_process(workspace: Path):
    process, url = start_studio(workspace)
    token = url.split("token=")[1]
    return process, url.split("/?")[0], token


@pytest.mark.slow
def test_sighup_stops_the_studio_as_sigterm_does_and_its_run_saves(workspace):
    process, base, token = studio_process(workspace)
    with httpx.Client(base_url=base, headers={"X-Studio-Token": token}) as http:
        assert http.post("/api/save", json={"name": "ens", **ensemble_run(steps=100000)}).status_code == 200
        pid = http.post("/api/runs/ens/start").json()["pid"]
    checkpoint = workspace / "checkpoints" / "ens"
    try:
        wait_for(lambda: len(logged_steps(checkpoint)) >= 3, "the run to log 3 steps")
        process.send_signal(signal.SIGHUP)
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0 and "microgpt studio: stopped" in out, err
        assert not alive(pid), "the studio stopped its run before it went"
        assert saved_step(checkpoint) == logged_steps(checkpoint)[-1]
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_a_later_studio_finds_a_run_still_training_and_stops_it(workspace):
    first = Studio(Workspace(workspace), TOKEN, "127.0.0.1", PORT)
    http = TestClient(first.app, base_url=f"http://127.0.0.1:{PORT}", headers={"X-Studio-Token": TOKEN})
    assert http.post("/api/save", json={"name": "ens", **ensemble_run(steps=100000)}).status_code == 200
    run = first.manager.start("ens")  # then its studio dies (SIGKILL): nobody stops the run
    checkpoint = workspace / "checkpoints" / "ens"
    try:
        wait_for(lambda: len(logged_steps(checkpoint)) >= 3, "the run to log 3 steps")
        process, base, token = studio_process(workspace)
        try:
            assert f"run ens is training in process {run.process.pid}" in process.stdout.readline()
            with httpx.Client(base_url=base, headers={"X-Studio-Token": token}) as later:
                rows = {row["name"]: row for row in later.get("/api/runs").json()["runs"]}
                assert rows["ens"]["studio"]["pid"] == run.process.pid and rows["ens"]["studio"]["elsewhere"]
                started = later.post("/api/runs/ens/start")
                assert started.status_code == 409
                assert f"is being written by process {run.process.pid}" in started.json()["error"]
                assert later.post("/api/runs/ens/stop").json()["stopping"] is True
            run.process.wait(120)
            assert saved_step(checkpoint) == logged_steps(checkpoint)[-1]
        finally:
            process.send_signal(signal.SIGINT)
            process.communicate(timeout=120)
    finally:
        if alive(run.process.pid):
            run.process.kill()


@pytest.mark.slow
def test_ctrl_c_with_streams_open_says_one_line_not_tracebacks(workspace):
    process, base, token = studio_process(workspace)
    opened = []

    def listen():
        try:
            with httpx.stream("GET", f"{base}/api/stream", headers={"X-Studio-Token": token}, timeout=60) as stream:
                opened.append(True)
                for _ in stream.iter_bytes():
                    pass
        except httpx.HTTPError:
            pass

    listeners = [threading.Thread(target=listen, daemon=True) for _ in range(6)]
    for listener in listeners:
        listener.start()
    deadline = 60
    while len(opened) < len(listeners) and deadline > 0:
        threading.Event().wait(0.1)
        deadline -= 0.1
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0 and "microgpt studio: stopped" in out
    assert "Traceback" not in err and "CancelledError" not in err, err


def test_starting_over_a_finished_run_asks_first(client, studio, workspace):
    assert client.post("/api/save", json={"name": "ens", **ensemble_run(steps=3)}).status_code == 200
    assert client.post("/api/runs/ens/start").status_code == 200
    assert studio.manager.runs["ens"].process.wait(120) == 0
    again = client.post("/api/runs/ens/start")
    assert again.status_code == 409 and again.json()["exists"] is True
    assert "finished, step 3 of 3" in again.json()["error"]
    replaced = client.post("/api/runs/ens/start", json={"overwrite": True})
    assert replaced.status_code == 200
    assert studio.manager.runs["ens"].process.wait(120) == 0


# ---- found in review -------------------------------------------------------------------------------------

@pytest.mark.parametrize("model", [".", "checkpoints/.."])
def test_the_workspace_itself_is_no_checkpoint_to_write(client, model):
    run = lookahead_run()
    run["settings"]["model"] = model
    errors = client.post("/api/graph/check", json=check_body(run)).json()["errors"]
    assert errors and "the workspace itself" in errors[0]["message"]


def test_a_checkpoint_whose_files_link_outside_is_listed_damaged_and_never_read(client, workspace):
    microgpt.train(str(workspace / "tiny.txt"), steps=2, d_model=8, n_layers=1, seq_len=8, batch_size=2,
                   backend="numpy", threads=1, gen=0, model=str(workspace / "ck"))
    outside = workspace.parent / "outside.json"
    (workspace / "ck" / "config.json").rename(outside)
    (workspace / "ck" / "config.json").symlink_to(outside)
    rows = {row["name"]: row for row in client.get("/api/runs").json()["runs"]}
    assert rows["ck"]["damaged"] and rows["ck"]["error"] == (
        f"ck/config.json links to {outside}, outside the workspace, so ck is not read; remove the link")
    assert "outside the workspace" in one_line_error(client.get("/api/sample?checkpoint=ck&tokens=3"), 403)
    assert "outside the workspace" in one_line_error(client.post("/api/eval", json={"checkpoint": "ck",
                                                                                     "file": "tiny.txt"}), 403)


def test_a_symlinked_studio_yaml_is_refused_at_start(workspace):
    (workspace.parent / "elsewhere.yaml").write_text("runs: {}\n", encoding="utf-8")
    (workspace / "studio.yaml").symlink_to(workspace.parent / "elsewhere.yaml")
    with pytest.raises(WorkspaceError, match="symlink"):
        Workspace(workspace)


def test_a_link_planted_where_a_followed_log_will_be_is_not_read(workspace):
    from microgpt.studio.metrics import Tail

    secret = workspace.parent / "secret.jsonl"
    secret.write_text('{"step": 1, "loss": 0.5, "time": 1.0}\n', encoding="utf-8")
    log = workspace / "run.metrics.jsonl"
    tail = Tail(log, 0, None)  # a stream opened before the run logged anything
    assert tail.read() == []
    log.symlink_to(secret)
    assert tail.read() == []


@pytest.mark.parametrize("points", ["%C2%B2", "9" * 5000])
def test_a_digit_that_is_no_number_is_one_line(client, points):
    assert "points" in one_line_error(client.get(f"/api/metrics?run=x&points={points}"), 400)


def test_a_stale_pid_in_a_lock_file_is_no_run_training(workspace):
    from microgpt.training.run_dir import WriterLock

    lock = WriterLock(workspace / "checkpoints" / "ens")
    lock.acquire().release()  # the file stays, with this process's pid: it holds no lock now
    assert lock.holder() is None
    lock.acquire()
    try:
        assert lock.holder() == os.getpid()
    finally:
        lock.release()


@pytest.mark.slow
def test_samples_whose_page_went_away_give_their_slots_back(workspace):
    microgpt.train(str(workspace / "tiny.txt"), steps=2, d_model=8, n_layers=1, seq_len=8, batch_size=2,
                   backend="numpy", threads=1, gen=0, model=str(workspace / "ck"))
    process, base, token = studio_process(workspace)
    try:
        with httpx.Client(base_url=base, headers={"X-Studio-Token": token}, timeout=120) as http:
            for _ in range(MAX_MODEL_PROCESSES + 1):  # each left after its first bytes, as a new Generate does
                with http.stream("GET", "/api/sample", params={"checkpoint": "ck", "tokens": "20000"}) as stream:
                    assert stream.status_code == 200
                    next(stream.iter_bytes())
            answer = http.get("/api/sample", params={"checkpoint": "ck", "tokens": "5", "temperature": "0"})
            assert answer.status_code == 200 and '"done": true' in answer.text, answer.text
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=120)


@pytest.mark.parametrize("path", ["/api/metrics?run=", "/api/csv?run=", "/api/config?name=", "/api/sample?checkpoint="])
def test_a_name_too_long_for_the_file_system_is_one_line(client, path):
    one_line_error(client.get(path + "x" * 300), 400)


@pytest.mark.parametrize("body, said", [('{"name": 1' + "0" * 5000 + "}", "thousands of digits"),
                                        (b'\xff\xfe{"a', "must be a JSON object")])
def test_a_number_too_long_to_read_is_said_as_such(client, body, said):
    answer = client.post("/api/graph/check", content=body, headers={"Content-Type": "application/json"})
    assert said in one_line_error(answer, 400)


def test_a_graph_run_that_names_no_graph_is_one_line_on_load(client, workspace):
    (workspace / "studio.yaml").write_text("runs:\n  bare: {family: graph}\n", encoding="utf-8")
    message = one_line_error(client.get("/api/config", params={"name": "bare"}), 400)
    assert "without a graph" in message and "None" not in message


@pytest.mark.parametrize("method, path, status, said", [("GET", "/api/nothing", 404, "has no /api/nothing"),
                                                        ("GET", "/api/save", 405, "takes POST, not GET"),
                                                        ("PUT", "/api/runs/x/start", 405, "takes POST, not PUT"),
                                                        ("POST", "/", 405, "not POST")])
def test_a_route_or_method_the_studio_has_not_is_one_line_of_json(client, method, path, status, said):
    assert said in one_line_error(client.request(method, path), status)


def test_a_studio_yaml_that_is_not_yaml_is_one_line_everywhere(client, workspace):
    (workspace / "studio.yaml").write_text("\0 garbage: [\n", encoding="utf-8")
    for answer in (client.get("/api/configs"), client.get("/api/free-name"), client.get("/api/config?name=a"),
                   client.post("/api/runs/a/start")):
        assert "not valid YAML" in one_line_error(answer, 400)


@pytest.mark.parametrize("make", ["directory", "fifo", "not a graph"])
def test_a_graph_run_whose_graph_cannot_be_read_is_refused_at_start(client, studio, workspace, make):
    place = workspace / "g.json"
    if make == "directory":
        place.mkdir()
    elif make == "fifo":
        os.mkfifo(place)
    else:
        place.write_text("[1, 2]", encoding="utf-8")
    (workspace / "studio.yaml").write_text("runs:\n  g: {family: graph, graph: g.json, steps: 2}\n", encoding="utf-8")
    assert "g.json" in one_line_error(client.post("/api/runs/g/start"), 400)
    assert "g" not in studio.manager.runs


def test_a_checkpoint_directory_linked_out_of_the_workspace_is_refused_at_start(client, studio, workspace):
    assert client.post("/api/save", json={"name": "lnk", **lookahead_run(steps=2)}).status_code == 200
    outside = workspace.parent / "elsewhere"
    outside.mkdir()
    (workspace / "checkpoints").mkdir(exist_ok=True)
    (workspace / "checkpoints" / "lnk").symlink_to(outside)
    assert "outside the workspace" in one_line_error(client.post("/api/runs/lnk/start"), 403)
    assert "lnk" not in studio.manager.runs and list(outside.iterdir()) == []
    rows = client.get("/api/runs").json()["runs"]  # checkpoints/ is a folder, no run: not a damaged one either
    assert not [row for row in rows if row.get("damaged") or row["path"].startswith("checkpoints")], rows


def test_a_plain_folder_holding_a_link_out_is_no_damaged_run(client, workspace):
    """graphs/ with one document linking outside: the run list lists the runs and not graphs/ (it listed the
    folder as a damaged run, issue 52 item 7); a run whose graph is that link is refused, naming it."""
    microgpt.train(str(workspace / "tiny.txt"), steps=2, d_model=8, n_layers=1, seq_len=8, batch_size=2,
                   backend="numpy", threads=1, gen=0, model=str(workspace / "ck"))
    outside = workspace.parent / "outside.json"
    outside.write_text("{}", encoding="utf-8")
    (workspace / "graphs").mkdir()
    (workspace / "graphs" / "out.json").symlink_to(outside)
    (workspace / "graphs" / "ck").mkdir()  # and a folder below it is still searched
    microgpt.train(str(workspace / "tiny.txt"), steps=2, d_model=8, n_layers=1, seq_len=8, batch_size=2,
                   backend="numpy", threads=1, gen=0, model=str(workspace / "graphs" / "ck" / "inner"))
    rows = {row["path"]: row for row in client.get("/api/runs").json()["runs"]}
    assert sorted(rows) == ["ck", "graphs/ck/inner"] and not any(row.get("damaged") for row in rows.values())
    (workspace / "studio.yaml").write_text("runs:\n  g: {family: graph, graph: graphs/out.json, steps: 2}\n",
                                           encoding="utf-8")
    assert "graphs/out.json" in one_line_error(client.post("/api/runs/g/start"), 403)


@pytest.mark.parametrize("query, said", [("tokens=abc", "tokens must be a whole number, not 'abc'"),
                                         ("seed=1e400", "seed must be a whole number, not '1e400'"),
                                         ("top_k=1.5", "top-k must be a whole number, not '1.5'"),
                                         ("temperature=hot", "temperature must be a number, not 'hot'"),
                                         ("tokens=-5", "--tokens must be a whole number of at least 0, got -5"),
                                         ("top_p=2", "--top-p must be a number above 0 and at most 1, got 2.0")])
def test_a_bad_sampling_setting_is_one_line_naming_it(client, workspace, query, said):
    microgpt.train(str(workspace / "tiny.txt"), steps=1, d_model=8, n_layers=1, seq_len=8, batch_size=2,
                   backend="numpy", threads=1, gen=0, model=str(workspace / "ck"))
    assert one_line_error(client.get(f"/api/sample?checkpoint=ck&{query}"), 400) == said


def test_a_failed_evaluation_says_the_problem_as_the_page_names_its_file(client, workspace):
    microgpt.train(str(workspace / "tiny.txt"), steps=1, d_model=8, n_layers=1, seq_len=8, batch_size=2,
                   backend="numpy", threads=1, gen=0, model=str(workspace / "ck"))
    (workspace / "notab.txt").write_text("no tab here\n", encoding="utf-8")
    answer = client.post("/api/eval", json={"checkpoint": "ck", "prompts": "notab.txt", "backend": "numpy"})
    assert one_line_error(answer, 400).startswith("notab.txt line 1 has no tab")


@pytest.mark.parametrize("tokenizer", ["/etc/passwd", "../tokenizer.json"])
def test_a_tokenizer_file_outside_the_workspace_is_refused_in_the_check_and_at_start(client, studio, workspace,
                                                                                      tokenizer):
    document = {"microgpt_graph": 1, "dims": {"d": 8}, "nodes": [
        {"id": "emb", "op": "embedding"}, {"id": "head", "op": "logits"}, {"id": "loss", "op": "cross_entropy"}],
        "edges": [{"from": "tokens", "to": "emb.ids"}, {"from": "emb.out", "to": "head.x"},
                  {"from": "head.out", "to": "loss.logits"}, {"from": "head.out", "to": "logits"}]}
    answer = client.post("/api/graph/check", json={"document": document,
                                                   "settings": {"file": "tiny.txt", "tokenizer": tokenizer}}).json()
    assert [error["setting"] for error in answer["errors"]] == ["tokenizer"]
    assert "outside the workspace" in answer["errors"][0]["message"]
    (workspace / "g.json").write_text(json.dumps(document), encoding="utf-8")
    (workspace / "studio.yaml").write_text(f"runs:\n  t: {{family: graph, graph: g.json, tokenizer: '{tokenizer}'}}\n",
                                           encoding="utf-8")
    assert "outside the workspace" in one_line_error(client.post("/api/runs/t/start"), 403)
    assert "t" not in studio.manager.runs
