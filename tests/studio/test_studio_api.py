"""The studio's API through Starlette's TestClient: the guard (token, Host, Origin), paths held inside the
workspace (through '..' and through a symlink), a family's settings checked by the library's own rules with each
error on its setting, saving to the YAML the CLI trains from (a family's own graph as the family's settings, any
other as a graph run, whatever the page claims), the workspace lock and the checkpoint writer lock; a run
stopped and resumed; and a real `microgpt studio` process: the warning off loopback, and Ctrl-C stopping its
runs with SIGTERM (so they save) or, with --keep-runs, leaving them training."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
import yaml

from extras import need

need("starlette")
need("httpx")

from starlette.testclient import TestClient

from dataset_files import write_dataset
from microgpt.core.registry import FAMILIES
from microgpt.model.checkpoint import is_checkpoint
from microgpt.model.family import family, n_params
from microgpt.settings.known import family_keys, known_settings
from microgpt.settings.named_runs import load_run
from microgpt.settings.sources import Settings
from microgpt.studio.app import Studio
from microgpt.studio.graph_run import offered_families, settings_form
from microgpt.studio.metrics import chart_of
from microgpt.studio.workspace import StudioLock, Workspace, WorkspaceError
from microgpt.training.run_dir import WriterLock
from studio_server import PORT, TOKEN, http_client, logged_steps, saved_step, start_studio, stop_studio
from studio_workspace import check_body, ensemble_run, lookahead_run
from waiting import WAIT_S, alive, wait_for


def test_a_request_without_the_token_is_refused(workspace):
    """Every API call needs the token; the page and its files hold no secret and need none."""
    studio = Studio(Workspace(workspace), TOKEN, "127.0.0.1", PORT)
    bare = TestClient(studio.app, base_url=f"http://127.0.0.1:{PORT}")
    for path in ("/api/graph/settings", "/api/runs", "/api/metrics?run=x", "/api/sample?checkpoint=x"):
        answer = bare.get(path)
        assert answer.status_code == 401 and "token" in answer.json()["error"], path
    assert bare.get("/api/graph/settings", headers={"X-Studio-Token": "wrong"}).status_code == 401
    assert bare.get("/api/graph/settings", headers={"X-Studio-Token": ""}).status_code == 401
    assert bare.get(f"/api/graph/settings?token={TOKEN}").status_code == 200
    assert bare.get("/api/graph/settings", headers={"X-Studio-Token": TOKEN}).status_code == 200
    for path in ("/", "/static/editor.js"):
        answer = bare.get(path)
        assert answer.status_code == 200 and TOKEN not in answer.text, path
        assert "set-cookie" not in answer.headers, path  # a cookie would reach every port of this host


def test_a_bad_host_header_and_a_cross_site_origin_are_refused(client):
    rebound = client.get("/api/graph/settings", headers={"Host": "evil.example:8765"})
    assert rebound.status_code == 403 and "Host" in rebound.json()["error"]
    assert client.get("/api/graph/settings", headers={"Host": "127.0.0.1:9999"}).status_code == 403
    cross = client.post("/api/graph/check", json=check_body(ensemble_run()), headers={"Origin": "http://evil.example"})
    assert cross.status_code == 403 and "cross-site" in cross.json()["error"]
    assert client.get("/api/graph/settings", headers={"Sec-Fetch-Site": "cross-site"}).status_code == 403
    assert client.get("/api/graph/settings", headers={"Host": f"localhost:{PORT}", "Origin": f"http://localhost:{PORT}"}
                      ).status_code == 200


def test_paths_outside_the_workspace_are_refused_through_dotdot_and_symlinks(client, workspace, tmp_path_factory):
    outside = tmp_path_factory.mktemp("outside")
    (outside / "secret.txt").write_text("not yours\n" * 50, encoding="utf-8")
    os.symlink(outside, workspace / "link")
    os.symlink(outside / "secret.txt", workspace / "secret.txt")
    for path in ("../outside/secret.txt", "link/secret.txt", "secret.txt", "/etc/passwd", "link"):
        answer = client.get("/api/metrics", params={"run": path})
        assert answer.status_code == 403 and "outside the workspace" in answer.json()["error"], path
    run = ensemble_run()
    run["settings"]["file"] = "link/secret.txt"
    checked = client.post("/api/graph/check", json=check_body(run)).json()
    assert not checked["ok"] and "outside the workspace" in checked["errors"][0]["message"]
    assert checked["errors"][0]["setting"] == "file"
    answer = client.post("/api/eval", json={"checkpoint": "../outside", "file": "tiny.txt"})
    assert answer.status_code == 403
    assert client.get("/api/csv", params={"run": "../outside/x"}).status_code == 403
    assert client.get("/static/..%2Fapp.py").status_code == 404


def test_run_names_that_could_escape_are_refused(client):
    for name in ("../x", "a/b", ".hidden", "-rf", "x" * 65):
        answer = client.post("/api/save", json={"name": name, **ensemble_run()})
        assert answer.status_code == 400 and "run name" in answer.json()["error"], name


def test_each_error_appears_on_the_setting_it_concerns_and_clears(client):
    run = ensemble_run()
    checked = client.post("/api/graph/check", json=check_body(run)).json()
    assert checked["ok"], checked["errors"]
    assert checked["parameters"] > 0 and checked["memory_bytes"] > 0 and checked["tokens_per_second"] > 0
    run["settings"]["cooperative"] = "d2x8n1,d2x8"  # the second expert
    errors = client.post("/api/graph/check", json=check_body(run)).json()["errors"]
    assert [e["setting"] for e in errors] == ["cooperative"] and "model spec 'd2x8' is not valid" in errors[0]["message"]
    run["settings"]["cooperative"] = "d2x8n1,d2x8n1"
    run["settings"]["active_dims"] = "32"  # wider than the stream: the family's own check
    errors = client.post("/api/graph/check", json=check_body(run)).json()["errors"]
    assert len(errors) == 1 and "active_dims: 32 is wider than the stream (stream_dim: 16)" in errors[0]["message"], errors
    del run["settings"]["active_dims"]
    run["settings"]["lr"] = "fast"  # the flag's own check
    errors = client.post("/api/graph/check", json=check_body(run)).json()["errors"]
    assert [(e["setting"], e["message"]) for e in errors] == [("lr", "lr must be a number, not 'fast'")]  # its field
    del run["settings"]["lr"]
    assert client.post("/api/graph/check", json=check_body(run)).json()["ok"]


def saved_runs(workspace) -> dict:
    return yaml.safe_load((workspace / "studio.yaml").read_text(encoding="utf-8"))["runs"]


def test_the_saved_yaml_is_what_the_cli_trains(client, workspace):
    run = ensemble_run()
    checked = client.post("/api/graph/check", json=check_body(run)).json()
    saved = client.post("/api/save", json={"name": "ens", **run}).json()
    assert saved["command"] == "microgpt train --config studio.yaml --run ens"
    named = load_run(workspace / "studio.yaml", "ens")
    settings = Settings({}, named)
    assert settings.value("family") == "ensemble" and settings.value("cooperative") == "d2x8n1,d2x8n1"
    vocab = len(set((workspace / "tiny.txt").read_text(encoding="utf-8")))
    assert n_params(family("ensemble"), settings.model_config(vocab)) == checked["parameters"]
    loaded = client.get("/api/config", params={"name": "ens"}).json()
    assert loaded["family"] == "ensemble" and loaded["settings"] == {**run["settings"], "file": "tiny.txt"}
    assert client.post("/api/graph/check", json=check_body(loaded)).json()["parameters"] == checked["parameters"]
    broken = ensemble_run(expert="d2x8")
    answer = client.post("/api/save", json={"name": "bad", **broken})
    assert answer.status_code == 200 and answer.json()["file"] == "studio/drafts/bad.json", answer.json()
    assert answer.json()["errors"][0]["setting"] == "cooperative", "a draft's errors still name their field"
    assert "bad" not in (workspace / "studio.yaml").read_text(encoding="utf-8")


def test_a_familys_own_graph_saved_unchanged_is_the_familys_named_run(client, workspace):
    """A draft still exactly the graph from-family writes for its family and settings is saved as those
    settings: no document beside it, and the YAML the CLI's flags would give."""
    run = ensemble_run()
    saved = client.post("/api/save", json={"name": "ens", **run, "layout": {"positions": {"/expert1": [5, 6]}}})
    assert saved.status_code == 200, saved.json()
    assert saved.json()["command"] == "microgpt train --config studio.yaml --run ens"
    assert "graph" not in saved.json() and not (workspace / "graphs").exists()
    assert saved_runs(workspace)["ens"] == {"family": "ensemble", "file": "tiny.txt", "seq_len": 16,
                                            "cooperative": "d2x8n1,d2x8n1", "stream_dim": 16, "steps": 30,
                                            "batch_size": 4, "backend": "numpy", "threads": 1, "gen": 0}
    assert yaml.safe_load(saved.json()["yaml"]) == {"runs": {"ens": saved_runs(workspace)["ens"]}}
    assert client.get("/api/config", params={"name": "ens"}).json()["layout"]["positions"] == {"/expert1": [5, 6]}


def test_a_familys_graph_with_one_node_changed_is_saved_as_a_graph_run(client, workspace):
    run = ensemble_run()
    node = next(n for n in run["document"]["nodes"] if n["id"] == "expert2")
    node["params"] = {**node["params"], "d_ff": 32}  # the second expert's feed-forward narrower than its spec
    saved = client.post("/api/save", json={"name": "ens", **run})
    assert saved.status_code == 200, saved.json()
    entry = saved_runs(workspace)["ens"]
    assert entry["family"] == "graph" and entry["graph"] == "graphs/ens.json"
    assert not {"cooperative", "stream_dim"} & set(entry), "the family's shape settings are its document now"
    assert entry["file"] == "tiny.txt" and entry["seq_len"] == 16 and entry["steps"] == 30
    written = json.loads((workspace / "graphs" / "ens.json").read_text(encoding="utf-8"))
    assert next(n for n in written["nodes"] if n["id"] == "expert2")["params"]["d_ff"] == 32
    trained = subprocess.run([sys.executable, "-m", "microgpt", "train", "--config", "studio.yaml", "--run", "ens",
                              "--steps", "1", "--no-save"], check=False, cwd=workspace, capture_output=True,
                             text=True, timeout=WAIT_S)
    assert trained.returncode == 0, trained.stderr


@pytest.mark.parametrize("claim", ["other settings", "another family", "not a document"])
def test_a_family_claimed_for_another_graph_is_never_saved_as_the_family(client, workspace, claim):
    """The page says which family and settings it drew from; the server draws them again and compares, so a
    claim that does not match the document makes a graph run (or, where the document is none, a refusal)."""
    drawn = ensemble_run()
    if claim == "other settings":
        body = {**drawn, "settings": {**drawn["settings"], "cooperative": "d2x8n1,d2x8n1,d2x8n1"}}
    elif claim == "another family":
        body = {**lookahead_run(), "document": drawn["document"]}
    else:
        body = {**drawn, "document": {"microgpt_graph": 1, "nodes": "all of them"}}
    answer = client.post("/api/save", json={"name": "forged", **body})
    entry = saved_runs(workspace).get("forged") if (workspace / "studio.yaml").exists() else None
    if claim == "not a document":
        assert answer.status_code == 400 and entry is None, answer.json()
        return
    assert answer.status_code == 200, answer.json()
    assert entry["family"] == "graph" and entry["graph"] == "graphs/forged.json"
    assert json.loads((workspace / "graphs" / "forged.json").read_text(encoding="utf-8")) == drawn["document"]


def test_a_checkpoint_another_process_writes_is_refused_with_the_writer_lock(client, workspace):
    client.post("/api/save", json={"name": "ens", **ensemble_run()})
    held = WriterLock(workspace / "checkpoints" / "ens").acquire()
    try:
        answer = client.post("/api/runs/ens/start")
    finally:
        held.release()
    assert answer.status_code == 409 and "is being written by process" in answer.json()["error"]


def test_a_second_studio_on_the_same_workspace_is_refused(workspace):
    first = StudioLock(Workspace(workspace)).acquire("http://127.0.0.1:1/?token=x")
    try:
        with pytest.raises(WorkspaceError, match="already served by a studio"):
            StudioLock(Workspace(workspace)).acquire("http://127.0.0.1:2/?token=y")
    finally:
        first.release()
    StudioLock(Workspace(workspace)).acquire("http://127.0.0.1:3/?token=z").release()


def test_every_registered_family_the_editor_offers_shows_its_settings():
    form = settings_form()
    assert {"gpt", "ensemble", "lookahead"} <= set(offered_families()) == set(form["families"])
    common = set(form["data"]) | set(form["training"])
    assert common <= set(known_settings()) and set(form["settings"]) <= set(known_settings())
    for name, described in form["families"].items():
        assert set(described["shape"]) == set(family_keys(family(name))) - set(form["data"]), name
        assert described["label"] and set(described["template"]) <= set(described["shape"]), name
    assert set(FAMILIES) - {"graph"} <= set(offered_families()), "a registered family has no from-family graph"


@pytest.mark.slow
def test_a_stopped_run_resumes_from_its_checkpoint(client, studio, workspace):
    client.post("/api/save", json={"name": "ens", **ensemble_run(steps=100000)})
    started = client.post("/api/runs/ens/start").json()
    assert started["running"] and started["checkpoint"] == "checkpoints/ens"
    checkpoint = workspace / "checkpoints" / "ens"
    wait_for(lambda: len(logged_steps(checkpoint)) >= 20, "the run to log 20 steps")
    again = client.post("/api/runs/ens/start")
    assert again.status_code == 400 and "is training already" in again.json()["error"]
    assert client.post("/api/runs/ens/stop").json()["stopping"]
    studio.manager.runs["ens"].process.wait(WAIT_S)
    state = next(s for s in client.get("/api/runs").json()["runs"] if s["path"] == "checkpoints/ens")
    assert not state["studio"]["running"] and state["studio"]["error"] is None  # SIGTERM: saved, not failed
    stopped_at = saved_step(checkpoint)
    assert stopped_at == logged_steps(checkpoint)[-1] >= 20
    resumed = client.post("/api/runs/ens/resume").json()
    assert resumed["running"]
    assert "--resume" in studio.manager.runs["ens"].process.args
    wait_for(lambda: logged_steps(checkpoint)[-1] >= stopped_at + 10, "the resumed run to log 10 more steps")
    client.post("/api/runs/ens/stop")
    studio.manager.runs["ens"].process.wait(WAIT_S)
    steps = logged_steps(checkpoint)
    assert steps == list(range(1, len(steps) + 1)), "the resumed run went on from its step, in the same log"
    assert saved_step(checkpoint) == steps[-1] > stopped_at


@pytest.mark.slow
def test_serving_beyond_loopback_warns(workspace):
    process, url = start_studio(workspace, "--host", "0.0.0.0")
    out, err = stop_studio(process)
    assert url.startswith("http://0.0.0.0:")
    assert "warning: serving on 0.0.0.0, beyond this machine" in err
    assert "microgpt studio: stopped" in out


@pytest.mark.slow
@pytest.mark.parametrize("keep_runs", [False, True], ids=["stops-runs", "keep-runs"])
def test_ctrl_c_stops_the_studio_and_its_runs_save_or_with_keep_runs_train_on(workspace, keep_runs):
    process, url = start_studio(workspace, *(["--keep-runs"] if keep_runs else []))
    with http_client(url) as http:
        assert http.post("/api/save", json={"name": "ens", **ensemble_run(steps=100000)}).status_code == 200
        pid = http.post("/api/runs/ens/start").json()["pid"]
    checkpoint = workspace / "checkpoints" / "ens"
    try:
        wait_for(lambda: len(logged_steps(checkpoint)) >= 5, "the run to log 5 steps")
        out, err = stop_studio(process)
        assert "microgpt studio: stopped" in out, err
        assert "warning" not in err  # on 127.0.0.1
        if keep_runs:
            assert f"leaving run ens training (process {pid})" in out
            assert alive(pid)
            steps = len(logged_steps(checkpoint))
            wait_for(lambda: len(logged_steps(checkpoint)) > steps, "the kept run to go on training")
            os.kill(pid, signal.SIGTERM)
            wait_for(lambda: not alive(pid), "the kept run to stop on SIGTERM")
        else:
            assert not alive(pid), "the studio waits for its runs to save and exit"
        assert saved_step(checkpoint) == logged_steps(checkpoint)[-1]  # SIGTERM: it finished its step and saved
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_a_runs_best_copy_is_folded_into_its_row_and_an_orphan_one_is_marked(client, studio, workspace):
    run = ensemble_run(steps=30)
    run["settings"].update(eval_every="10", val_tokens="200")
    client.post("/api/save", json={"name": "ens", **run})
    client.post("/api/runs/ens/start")
    assert studio.manager.runs["ens"].process.wait(WAIT_S) == 0
    assert is_checkpoint(workspace / "checkpoints" / "ens-best")
    rows = {row["path"]: row for row in client.get("/api/runs").json()["runs"]}
    assert set(rows) == {"checkpoints/ens"}, "the -best copy is not a row of its own"
    row = rows["checkpoints/ens"]
    assert row["best_checkpoint"] == "checkpoints/ens-best" and row["best_of"] is None
    assert 10 <= row["best_step"] <= 30 and row["best_val_loss"] <= row["val_loss"]
    assert row["parameters"] > 0 and row["model"].startswith("ensemble of 2 experts")
    assert row["tokenizer"] == "char" and row["val_bpc"] is not None  # Compare's columns, as microgpt runs shows
    assert row["best_val_bpc"] <= row["val_bpc"]
    for copy in (workspace / "checkpoints" / "ens").iterdir():  # a run killed before its first save: its -best
        copy.unlink()
    (workspace / "checkpoints" / "ens").rmdir()
    (workspace / "checkpoints" / "results.jsonl").unlink()
    fresh = TestClient(Studio(Workspace(workspace), TOKEN, "127.0.0.1", PORT).app, base_url=f"http://127.0.0.1:{PORT}",
                       headers={"X-Studio-Token": TOKEN})  # a later studio, which did not start the run
    rows = {row["path"]: row for row in fresh.get("/api/runs").json()["runs"]}
    orphan = rows["checkpoints/ens-best"]
    assert set(rows) == {"checkpoints/ens-best"} and orphan["best_of"] == "checkpoints/ens"
    assert orphan["family"] == "ensemble" and orphan["parameters"] == row["parameters"]
    assert orphan["model"] == row["model"] and orphan["best_val_loss"] == row["best_val_loss"]
    assert orphan["best_step"] == orphan["step"] == row["best_step"]


@pytest.mark.parametrize("mode", ["mtp", "gap"])
def test_a_lookahead_model_composes_checks_and_saves(client, workspace, mode):
    run = lookahead_run(mode)
    checked = client.post("/api/graph/check", json=check_body(run)).json()
    assert checked["ok"], checked["errors"]
    assert checked["parameters"] > 0 and "3 losses" in checked["description"]  # the main one and a head's each
    errors = client.post("/api/graph/check", json=check_body({**run, "settings": {**run["settings"], "lookahead": "0"}})
                         ).json()["errors"]
    assert [e["setting"] for e in errors] == ["lookahead"] and "lookahead must be" in errors[0]["message"], errors  # its field
    saved = client.post("/api/save", json={"name": f"look-{mode}", **run})
    assert saved.status_code == 200, saved.json()
    settings = Settings({}, load_run(workspace / "studio.yaml", f"look-{mode}"))
    assert settings.value("family") == "lookahead" and settings.value("lookahead_mode") == mode
    loaded = client.get("/api/config", params={"name": f"look-{mode}"}).json()
    assert loaded["family"] == "lookahead" and loaded["settings"]["lookahead_mode"] == mode
    assert client.post("/api/graph/check", json=check_body(loaded)).json()["parameters"] == checked["parameters"]


def test_a_prepared_dataset_in_the_workspace_is_offered_and_composes(client, workspace):
    """A dataset directory is a data file like a text: listed, checked with its own tokenizer, and a tokenizer
    setting for it refused on that setting."""
    text = (workspace / "tiny.txt").read_text(encoding="utf-8")
    write_dataset(workspace / "prepared", text, held_out=200, shard_tokens=500)
    assert "prepared" in client.get("/api/files").json()["files"]
    run = lookahead_run()
    run["settings"]["file"] = "prepared"
    checked = client.post("/api/graph/check", json=check_body(run)).json()
    assert checked["ok"], checked["errors"]
    run["settings"]["tokenizer"] = "bpe"
    errors = client.post("/api/graph/check", json=check_body(run)).json()["errors"]
    assert errors and "prepared dataset" in errors[0]["message"] and errors[0]["setting"] == "tokenizer", errors

def test_per_part_figures_share_a_chart_and_head_losses_stay_off_the_main_loss():
    assert chart_of("loss")["chart"] == chart_of("val_loss")["chart"] == "loss"
    heads = [chart_of(f"head{k}_loss") for k in (1, 2, 3)]
    assert {h["chart"] for h in heads} == {"head_loss"} and heads[0]["title"] == "head losses"
    assert [h["label"] for h in heads] == ["head 1", "head 2", "head 3"]
    assert chart_of("expert2_write_norm") == {"chart": "write_norm", "title": "write norm", "label": "expert 2"}
    assert chart_of("grad_norm") == {"chart": "grad_norm", "title": "gradient norm", "label": "grad_norm"}


@pytest.mark.slow
def test_the_cli_trains_the_saved_lookahead_model_and_watch_charts_its_head_losses(client, workspace):
    run = lookahead_run("mtp", steps=12)
    assert client.post("/api/save", json={"name": "look", **run}).status_code == 200
    trained = subprocess.run([sys.executable, "-m", "microgpt", "train", "--config", "studio.yaml", "--run", "look"],
                             check=False, cwd=workspace, capture_output=True, text=True, timeout=WAIT_S * 3)
    assert trained.returncode == 0, trained.stderr
    checkpoint = workspace / "checkpoints" / "look"
    assert json.loads((checkpoint / "config.json").read_text(encoding="utf-8"))["family"] == "lookahead"
    assert saved_step(checkpoint) == 12
    history = client.get("/api/metrics", params={"run": "checkpoints/look"}).json()
    assert {"head1_loss", "head2_loss", "loss"} <= set(history["columns"])
    charts = history["charts"]
    assert charts["head1_loss"]["chart"] == charts["head2_loss"]["chart"] != charts["loss"]["chart"]
    assert charts["head1_loss"]["title"] == "head losses"
    assert "step" not in charts and "time" not in charts


def test_a_studio_on_every_interface_answers_to_this_machines_names_and_no_others():
    """With --host 0.0.0.0 a browser elsewhere sends the machine's name or address; a rebinding page still sends
    its own name."""
    from microgpt.studio.guard import machine_names, studio_hosts

    hosts = studio_hosts("0.0.0.0", 8765)
    assert {f"{name}:8765" for name in machine_names() if ":" not in name} <= hosts
    assert "127.0.0.1:8765" in hosts and "evil.example:8765" not in hosts and "0.0.0.0:9999" not in hosts
    assert studio_hosts("127.0.0.1", 8765) == {"127.0.0.1:8765", "localhost:8765", "[::1]:8765"}
