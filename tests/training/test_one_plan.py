"""One plan builds every run (training/plan.py `plan`), and each front end words its errors its own way: the
command line (`microgpt train`, its --dry-run), Python (`microgpt.train`, `microgpt.plan`) and the studio's check
of a draft run (/api/graph/check) all plan through the same function, and one bad setting is one error object,
carrying its setting's key, that the command line says as flags (--lr), Python as keywords (lr=) and the studio
as its fields (lr, on the setting)."""

from __future__ import annotations

import pytest

import microgpt
from extras import need
from microgpt.cli import main
from microgpt.core.errors import ConfigError, UserError
from microgpt.training import plan as planning

TEXT = "the quick brown fox jumps over the lazy dog. " * 40
SHAPE = {"d_model": 12, "heads": 3, "n_layers": 1, "d_ff": 24, "seq_len": 16}
FLAGS = ["--d-model", "12", "--heads", "3", "--n-layers", "1", "--d-ff", "24", "--seq-len", "16", "--backend", "numpy",
         "--threads", "1", "--gen", "0", "--quiet"]
BAD = {"lr": 0.1, "min_lr": 0.5}  # a cosine schedule cannot end above its peak
TOKEN, PORT = "test-token", 8765  # the in-process studio's, as the studio tests have them


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "text.txt").write_text(TEXT)
    return tmp_path


@pytest.fixture
def planned(monkeypatch):
    """Every call of the plan's resolve, and the user error it raised (None where it planned)."""
    calls = []
    resolve = planning.resolve

    def recording(*given, **named):
        calls.append(None)
        try:
            return resolve(*given, **named)
        except UserError as exc:
            calls[-1] = exc
            raise

    monkeypatch.setattr(planning, "resolve", recording)
    return calls


def studio_check(workspace, settings: dict) -> dict:
    """The studio's check of a gpt draft with these settings, through its HTTP endpoint."""
    need("starlette")
    need("httpx")
    from starlette.testclient import TestClient

    from microgpt.studio.app import Studio
    from microgpt.studio.workspace import Workspace

    studio = Studio(Workspace(workspace), TOKEN, "127.0.0.1", PORT)
    try:
        client = TestClient(studio.app, base_url=f"http://127.0.0.1:{PORT}", headers={"X-Studio-Token": TOKEN})
        answer = client.post("/api/graph/check", json={"family": "gpt", "settings": settings})
        assert answer.status_code == 200, answer.text
        return answer.json()
    finally:
        studio.manager.stop_all()


def test_one_bad_setting_is_one_error_each_front_end_words_its_own_way(workdir, planned, capsys):
    assert main(["train", "text.txt", *FLAGS, "--lr", "0.1", "--min-lr", "0.5"]) == 2
    line = capsys.readouterr().err.strip().removeprefix("microgpt train: error: ")
    (error,) = planned
    assert isinstance(error, ConfigError) and error.key == "min_lr"
    assert line == str(error) == "--min-lr 0.5 must be between 0 and --lr 0.1"

    planned.clear()
    with pytest.raises(ConfigError) as raised:
        microgpt.train("text.txt", save=False, backend="numpy", threads=1, **SHAPE, **BAD)
    assert raised.value is planned[0] and raised.value.key == "min_lr"
    assert str(raised.value) == "min_lr=0.5 must be between 0 and lr=0.1"

    planned.clear()
    (workdir / "W").mkdir()
    (workdir / "W" / "text.txt").write_text(TEXT)
    result = studio_check(workdir / "W", {"file": "text.txt", **{key: str(value) for key, value in BAD.items()}})
    assert planned[0] is not None and planned[0].key == "min_lr"
    assert [(e["setting"], e["message"]) for e in result["errors"]] == [
        ("min_lr", "min_lr: 0.5 must be between 0 and lr: 0.1")]


def test_the_dry_run_of_each_front_end_goes_through_the_plan_and_writes_nothing(workdir, planned, capsys):
    assert main(["train", "text.txt", *FLAGS, "--steps", "7", "--model", "ck", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert len(planned) == 1 and planned[0] is None
    assert out.startswith("dry run: nothing trained or written\nstart: a new run\n")
    assert "training: 7 steps of 12 sequences of 16 tokens" in out and "saves: ck" in out
    assert sorted(p.name for p in workdir.iterdir()) == ["text.txt"]

    plan = microgpt.plan("text.txt", steps=7, model="ck", backend="numpy", threads=1, **SHAPE)
    assert len(planned) == 2 and planned[1] is None
    assert plan.describe() == out.splitlines()[1:]  # the same lines, from the same plan
    assert plan.config.seq_len == 16 and plan.vocab_size == len(set(TEXT))
    assert sorted(p.name for p in workdir.iterdir()) == ["text.txt"]

    (workdir / "W").mkdir()
    (workdir / "W" / "text.txt").write_text(TEXT)
    result = studio_check(workdir / "W", {"file": "text.txt", **{key: str(value) for key, value in SHAPE.items()}})
    assert result["ok"], result["errors"]
    assert len(planned) == 3 and planned[2] is None
    assert result["parameters"] == planning.n_params(planning.family("gpt"), plan.config)


def test_a_dry_run_with_compare_is_refused_in_one_line(workdir, capsys):
    assert main(["train", "text.txt", *FLAGS, "--compare", "d12n1", "--dry-run"]) == 2
    assert capsys.readouterr().err.strip() == ("microgpt train: error: --dry-run plans one run, and --compare "
                                               "several; drop one of them")


def test_a_dry_run_of_a_resume_says_so_and_leaves_the_checkpoint_as_it_was(workdir, capsys):
    assert main(["train", "text.txt", *FLAGS, "--steps", "2", "--model", "ck"]) == 0
    before = {path: path.read_bytes() for path in workdir.rglob("*") if path.is_file()}
    capsys.readouterr()
    assert main(["train", "text.txt", *FLAGS, "--steps", "4", "--resume", "ck", "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1] == "start: resuming ck" and "saves: ck" in out
    assert {path: path.read_bytes() for path in workdir.rglob("*") if path.is_file()} == before
