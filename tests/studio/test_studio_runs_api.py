"""The studio's runs kept safe and visible, through its API (Starlette's TestClient): a name that has a run or a
checkpoint is never replaced without "overwrite" (409 naming what is there, with a free name suggested), the
page's default name is a free one, a training run's row carries its live progress (step of total, ETA,
tokens/s, latest validation loss), a failed run's output is one request away, a resumed run's seconds and
tokens/s cover every leg, a -best saved while its run trains folds into the run's row, and an empty download
is refused with a reason."""

from __future__ import annotations

import itertools
import json

import pytest

from extras import need

need("starlette")
need("httpx")

from microgpt.model.checkpoint import is_checkpoint
from microgpt.training.run_files import RunPaths
from studio_workspace import ensemble_run, lookahead_run
from waiting import WAIT_S, wait_for


def row(client, path: str) -> dict:
    return next(r for r in client.get("/api/runs").json()["runs"] if r["path"] == path)


def trained(client, studio, name: str, steps: int = 3, run=None) -> None:
    assert client.post("/api/save", json={"name": name, **(run or ensemble_run(steps=steps))}).status_code == 200
    assert client.post(f"/api/runs/{name}/start").status_code == 200
    assert studio.manager.runs[name].process.wait(WAIT_S) == 0


def test_a_name_carried_over_to_another_family_is_refused_until_confirmed(client, workspace):
    assert client.post("/api/save", json={"name": "ens", **ensemble_run()}).status_code == 200
    assert client.post("/api/save", json={"name": "ens", **ensemble_run()}).status_code == 200  # the same
    answer = client.post("/api/save", json={"name": "ens", **lookahead_run()})
    assert answer.status_code == 409
    body = answer.json()
    assert body["exists"] is True and body["suggested"] == "ens-2"
    assert body["error"] == ("run ens exists (in studio.yaml (ensemble), not trained yet); replace it, or save as "
                             "ens-2")
    assert "ensemble" in (workspace / "studio.yaml").read_text(encoding="utf-8")
    assert "lookahead" not in (workspace / "studio.yaml").read_text(encoding="utf-8")
    assert client.post("/api/save", json={"name": "ens-2", **lookahead_run()}).status_code == 200
    assert client.post("/api/save", json={"name": "ens", **lookahead_run()}).json()["suggested"] == "ens-3"
    replaced = client.post("/api/save", json={"name": "ens", **lookahead_run(), "overwrite": True})
    assert replaced.status_code == 200
    assert client.get("/api/config", params={"name": "ens"}).json()["family"] == "lookahead"


def test_train_on_a_finished_runs_name_keeps_its_checkpoint_until_confirmed(client, studio, workspace):
    trained(client, studio, "ens")
    checkpoint = workspace / "checkpoints" / "ens"
    weights_before = {p.name: p.stat().st_mtime_ns for p in checkpoint.iterdir()}
    again = client.post("/api/runs/ens/start")
    assert again.status_code == 409
    assert again.json() == {"error": "run ens exists (in studio.yaml (ensemble), with a checkpoint checkpoints/ens "
                                     "(ensemble, finished, step 3 of 3)); replace it, or save as ens-2",
                            "exists": True, "suggested": "ens-2"}
    assert {p.name: p.stat().st_mtime_ns for p in checkpoint.iterdir()} == weights_before
    other = client.post("/api/save", json={"name": "ens", **ensemble_run(steps=4)})
    assert other.status_code == 409 and "finished, step 3 of 3" in other.json()["error"]
    assert client.post("/api/runs/ens/start", json={"overwrite": True}).status_code == 200
    assert studio.manager.runs["ens"].process.wait(WAIT_S) == 0


def test_a_checkpoint_without_a_yaml_entry_is_a_taken_name(client, studio, workspace):
    trained(client, studio, "ens")
    (workspace / "checkpoints" / "ens").rename(workspace / "checkpoints" / "cli-run")  # trained from a shell
    answer = client.post("/api/save", json={"name": "cli-run", **ensemble_run()})
    assert answer.status_code == 409 and "with a checkpoint checkpoints/cli-run" in answer.json()["error"]
    assert answer.json()["suggested"] == "cli-run-2"


def test_the_default_run_name_is_a_free_one(client, studio, workspace):
    assert client.get("/api/free-name").json() == {"name": "run1"}
    client.post("/api/save", json={"name": "run1", **ensemble_run()})
    assert client.get("/api/free-name").json() == {"name": "run2"}
    trained(client, studio, "run2")
    (workspace / "studio.yaml").unlink()  # the checkpoint alone still counts
    assert client.get("/api/free-name").json() == {"name": "run1"}
    client.post("/api/save", json={"name": "run1", **ensemble_run()})
    assert client.get("/api/free-name").json() == {"name": "run3"}


def test_one_broken_run_in_studio_yaml_keeps_the_default_name_but_not_a_save(client, workspace):
    """A hand edit that breaks one run: the page still gets its default name (the broken run's name is taken),
    while a save into the file says which run is wrong, as `microgpt train --config` does."""
    client.post("/api/save", json={"name": "run1", **ensemble_run()})
    config = workspace / "studio.yaml"
    config.write_text(config.read_text(encoding="utf-8") + "  run2: {family: graph, graph: 5}\n", encoding="utf-8")
    assert client.get("/api/free-name").json() == {"name": "run3"}
    answer = client.post("/api/save", json={"name": "run3", **ensemble_run()})
    assert answer.status_code == 400 and "run run2" in answer.json()["error"]


@pytest.mark.slow
def test_a_training_runs_state_carries_its_live_progress(client, studio, workspace):
    run = ensemble_run(steps=100000)
    run["settings"].update(eval_every="5", val_tokens="64")
    client.post("/api/save", json={"name": "ens", **run})
    client.post("/api/runs/ens/start")

    def progress():
        state = row(client, "checkpoints/ens")["studio"]
        found = state["progress"]
        return found if found["val_loss"] is not None and found["tokens_per_s"] and found["step"] >= 10 else None

    found = wait_for(progress, "the run's progress with a validation loss and a speed")
    assert found["steps"] == 100000 and found["eta_s"] > 0 and found["time"] > 0
    assert found["tokens_per_s"] > 0 and 0 < found["val_loss"] < 10
    later = wait_for(lambda: (p := row(client, "checkpoints/ens")["studio"]["progress"])["step"] > found["step"] and p,
                     "the progress to move on")
    # the ETA is the steps left at the measured speed, each time: not a pace, which other jobs' load can halve
    assert later["eta_s"] > 0 and later["tokens_per_s"] > 0 and later["time"] > found["time"]
    for shown in (found, later):  # (steps left) x (tokens a step: batch 4 x context 16) / (tokens a second)
        assert shown["eta_s"] == pytest.approx((100000 - shown["step"]) * 4 * 16 / shown["tokens_per_s"])


def test_a_failed_runs_error_and_the_tail_of_its_log(client, studio, workspace):
    client.post("/api/save", json={"name": "ens", **ensemble_run()})
    (workspace / "tiny.txt").write_text("", encoding="utf-8")  # nothing to train on: train says so and exits 1
    client.post("/api/runs/ens/start")
    studio.manager.runs["ens"].process.wait(WAIT_S)
    state = row(client, "checkpoints/ens")["studio"]
    assert not state["running"] and state["returncode"] not in (0, None) and state["error"]
    lines = client.get("/api/log", params={"name": "ens"}).json()["lines"]
    assert state["error"] in lines
    missing = client.get("/api/log", params={"name": "elsewhere"})
    assert missing.status_code == 400 and "this studio did not start it" in missing.json()["error"]
    assert client.get("/api/log", params={"name": "../x"}).status_code == 400


@pytest.mark.slow
def test_a_resumed_runs_seconds_and_tokens_per_second_cover_every_leg(client, studio, workspace):
    client.post("/api/save", json={"name": "ens", **ensemble_run(steps=100000)})
    checkpoint = workspace / "checkpoints" / "ens"
    log = RunPaths(checkpoint).metrics

    def lines() -> int:
        return len(log.read_text().splitlines()) if log.is_file() else 0

    for action in ("start", "resume"):
        client.post(f"/api/runs/ens/{action}")
        before = lines()
        wait_for(lambda: lines() >= before + 30, "30 more steps")  # noqa: B023 (waited for within the loop)
        client.post("/api/runs/ens/stop")
        studio.manager.runs["ens"].process.wait(WAIT_S)
    legs = [json.loads(line) for line in RunPaths(checkpoint).results.read_text().splitlines()]
    assert len(legs) == 2
    records = [json.loads(line) for line in RunPaths(checkpoint).metrics.read_text().splitlines()]
    found = row(client, "checkpoints/ens")
    assert found["seconds"] == round(records[-1]["time"], 1) > legs[-1]["seconds"]
    assert found["tokens_per_sec"] == round(records[-1]["step"] * 16 * 4 / records[-1]["time"], 1)


@pytest.mark.slow
def test_a_best_copy_saved_while_its_run_trains_folds_into_its_row(client, studio, workspace):
    run = ensemble_run(steps=100000)
    run["settings"].update(eval_every="3", val_tokens="64")
    client.post("/api/save", json={"name": "ens", **run})
    client.post("/api/runs/ens/start")
    best = RunPaths(workspace / "checkpoints" / "ens").best
    wait_for(lambda: is_checkpoint(best), "the run's first -best copy")
    runs = client.get("/api/runs").json()["runs"]
    assert not is_checkpoint(workspace / "checkpoints" / "ens")  # not saved yet: only its best copy is
    assert [r["path"] for r in runs] == ["checkpoints/ens"]
    assert runs[0]["best_checkpoint"] == "checkpoints/ens-best" and runs[0]["studio"]["running"]


def test_downloading_an_empty_selection_says_so(client, workspace):
    answer = client.get("/api/csv")
    assert answer.status_code == 400 and answer.json()["error"] == ("no run is selected; tick the runs to download "
                                                                    "first")
    (workspace / "checkpoints" / "quiet").mkdir(parents=True)
    answer = client.get("/api/csv", params={"run": "checkpoints/quiet"})
    assert answer.status_code == 400 and "no metrics records yet" in answer.json()["error"]


def write_log(path, steps: int, eval_every: int, tail: bytes = b"") -> None:
    with open(path, "wb") as log:
        for step in range(1, steps + 1):
            record = {"step": step, "loss": 3.0 / step, "time": step * 0.01, "lr": 1e-3}
            if step % eval_every == 0:
                record["val_loss"] = 3.5 / step
            log.write(json.dumps(record).encode() + b"\n")
        log.write(tail)


def test_one_tokens_per_second_in_the_chart_the_row_and_compare(tmp_path):
    """A step every 10 ms of 64 tokens, with a validation of 0.5 s after step 100: tokens/s at a record is the
    run's tokens so far over its time so far (validation included), the same figure in the history the chart
    draws, the row's live progress (and its ETA at that speed) and the whole run's row in Compare."""
    from microgpt.studio.metrics import add_speed, last_record, read_history
    from microgpt.studio.progress import Progress

    checkpoint = tmp_path / "run"
    with open(tmp_path / "run.metrics.jsonl", "w", encoding="utf-8") as log:
        log.writelines(json.dumps({"step": step, "loss": 1.0, "time": step * 0.01 + (0.5 if step > 100 else 0)}) + "\n"
                       for step in range(1, 201))
    speeds = read_history(tmp_path / "run.metrics.jsonl", 64, 2000)["columns"]["tokens_per_s"]
    assert speeds[99] == pytest.approx(100 * 64 / 1.0)  # step 100 at 1 s: no validation yet
    assert speeds[199] == pytest.approx(200 * 64 / 2.5)  # step 200 at 2.5 s, the validation's 0.5 s among them
    shown = Progress(checkpoint, 400, 64).read()
    assert shown["tokens_per_s"] == pytest.approx(speeds[199])
    assert shown["eta_s"] == pytest.approx(200 * 64 / speeds[199])  # 200 steps left at that speed
    last = last_record(tmp_path / "run.metrics.jsonl")  # what Compare's row reads (app.whole_run_figures)
    add_speed(last, 64)
    assert last["tokens_per_s"] == pytest.approx(speeds[199])


def test_a_long_logs_history_is_an_even_sample_with_every_validation_record(tmp_path):
    from microgpt.studio.metrics import read_history

    log = tmp_path / "run.metrics.jsonl"
    write_log(log, 100_000, 1000, tail=b'{"step": 100001, "lo')  # a line being written is left for the stream
    history = read_history(log, 64, 400)
    assert history["records"] == 100_000 and history["offset"] == log.stat().st_size - len(b'{"step": 100001, "lo')
    columns = history["columns"]
    assert len(columns["step"]) <= 400 and columns["step"][-1] == 100_000
    assert sum(v is not None for v in columns["val_loss"]) == 100  # each of the 100 evaluations, one a bucket
    gaps = [b - a for a, b in itertools.pairwise(columns["step"])]
    assert max(gaps) < 2 * 100_000 / len(gaps), "no stretch of the run is left out"
    assert all(a > b for a, b in itertools.pairwise(columns["loss"]))  # a falling curve stays a falling curve
    short = tmp_path / "short.metrics.jsonl"
    write_log(short, 300, 50)
    every = read_history(short, 64, 2000)["columns"]  # short: every line is read
    assert every["step"] == list(range(1, 301)) and every["loss"] == [3.0 / s for s in range(1, 301)]
