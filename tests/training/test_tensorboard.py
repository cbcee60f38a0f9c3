"""--log tensorboard: event files beside the checkpoint whose scalars are metrics.jsonl's, step for step (an
ensemble's per-expert figures and a lookahead model's per-head losses too), a resume that hides what a killed
run logged past its save, and the refusals: the extra missing, --no-save, a symlink in the directory's place.

The event files are read here without the writer: TFRecord framing (length, masked CRC-32C, data, masked
CRC-32C, each checked) around `Event` protocol buffers, parsed with the schema tensorboardX ships."""

from __future__ import annotations

import json
import struct
import sys
import time

import pytest

import microgpt
from extras import need
from microgpt.cli import main
from microgpt.core.errors import ConfigError
from microgpt.training.tensorboard_log import tag_of

TEXT = "the cat sat on the mat; the dog sat on the log.\n" * 80
TINY = ["--backend", "numpy", "--threads", "1", "--seq-len", "16", "--batch-size", "4", "--val-tokens", "200",
        "--gen", "0", "--quiet"]
GPT = ["--d-model", "16", "--n-layers", "1"]


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), bit by bit: slow, and short to check by eye."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(path) -> list[bytes]:
    """The TFRecord payloads of an event file, every checksum checked."""
    blob, out, at = path.read_bytes(), [], 0
    while at < len(blob):
        header = blob[at : at + 8]
        (length,) = struct.unpack("<Q", header)
        assert struct.unpack("<I", blob[at + 8 : at + 12])[0] == masked(header)
        data = blob[at + 12 : at + 12 + length]
        assert struct.unpack("<I", blob[at + 12 + length : at + 16 + length])[0] == masked(data)
        out.append(data)
        at += 16 + length
    return out


def scalars(directory) -> dict[str, dict[int, float]]:
    """tag -> {step: value} over the directory's event files in name order, as TensorBoard reads them: a
    session start at step S (a purge) hides what earlier files logged at S and after."""
    event_pb2 = need("tensorboardX.proto.event_pb2")
    found: dict[str, dict[int, float]] = {}
    for path in sorted(directory.glob("events.out.tfevents.*")):
        for data in records(path):
            event = event_pb2.Event.FromString(data)
            if event.HasField("session_log") and event.session_log.status == event_pb2.SessionLog.START:
                found = {tag: {s: v for s, v in steps.items() if s < event.step} for tag, steps in found.items()}
            for value in event.summary.value:
                found.setdefault(value.tag, {})[event.step] = value.simple_value
    return found


def metrics(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def assert_same_figures(board: dict, log: list[dict]) -> None:
    """Every number of every metrics line is the scalar of its tag at its step; the board holds no other step.
    TensorBoard's simple_value is a float32, so the values agree to float32's precision (rel 1e-6 > 2**-23)."""
    for record in log:
        for key, value in record.items():
            if key not in ("step", "time"):
                assert board[tag_of(key)][record["step"]] == pytest.approx(value, rel=1e-6), key
        assert board["speed/tokens_per_sec"][record["step"]] > 0
    steps = {record["step"] for record in log}
    assert all(set(by_step) <= steps for by_step in board.values())
    assert set(board["loss/train"]) == steps


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "text.txt").write_text(TEXT, encoding="utf-8")
    return tmp_path


def test_the_events_carry_every_figure_of_the_metrics_log(workdir):
    need("tensorboardX")
    assert main(["train", "text.txt", "--steps", "12", "--eval-every", "4", "--model", "m", "--log", "tensorboard",
                 *GPT, *TINY]) == 0
    board, log = scalars(workdir / "m.tensorboard"), metrics(workdir / "m.metrics.jsonl")
    assert_same_figures(board, log)
    assert set(board["loss/val"]) == {4, 8, 12} and {"optim/lr", "optim/grad_norm"} <= set(board)
    assert not any(p.name.endswith(".tensorboard") for p in (workdir / "m").iterdir())  # beside, not inside


def test_per_expert_and_per_head_figures(workdir):
    need("tensorboardX")
    assert main(["train", "text.txt", "--steps", "6", "--model", "e", "--log", "tensorboard", "--cooperative",
                 "d16n1,d16n1", "--stream-dim", "16", *TINY]) == 0
    board = scalars(workdir / "e.tensorboard")
    assert_same_figures(board, metrics(workdir / "e.metrics.jsonl"))
    assert {"experts/expert1_router_weight", "experts/expert2_router_weight"} <= set(board)
    assert main(["train", "text.txt", "--steps", "6", "--model", "h", "--log", "tensorboard", "--lookahead", "2",
                 *GPT, *TINY]) == 0
    board = scalars(workdir / "h.tensorboard")
    assert_same_figures(board, metrics(workdir / "h.metrics.jsonl"))
    assert any(tag.startswith("heads/head") for tag in board)


def test_a_resume_hides_the_steps_a_killed_run_logged_after_its_save(workdir):
    SummaryWriter = need("tensorboardX").SummaryWriter

    assert main(["train", "text.txt", "--steps", "8", "--model", "m", "--log", "tensorboard", *GPT, *TINY]) == 0
    # a run killed after its save at step 8 had logged steps 9 and 10 (its file named as the module names them)
    killed = SummaryWriter(str(workdir / "m.tensorboard"), filename_suffix=f".{time.time_ns()}.0")
    for step in (9, 10):
        killed.add_scalar("loss/train", 99.0, global_step=step)
    killed.close()
    assert main(["train", "--resume", "m", "--steps", "12", "--log", "tensorboard", "--quiet", "--gen", "0"]) == 0
    board, log = scalars(workdir / "m.tensorboard"), metrics(workdir / "m.metrics.jsonl")
    assert [record["step"] for record in log] == list(range(1, 13))
    assert_same_figures(board, log)
    assert 99.0 not in board["loss/train"].values()


def test_a_resume_keeps_log_tensorboard(workdir):
    need("tensorboardX")
    assert main(["train", "text.txt", "--steps", "4", "--model", "m", "--log", "tensorboard", *GPT, *TINY]) == 0
    assert main(["train", "--resume", "m", "--steps", "8", "--quiet", "--gen", "0"]) == 0
    assert set(scalars(workdir / "m.tensorboard")["loss/train"]) == set(range(1, 9))
    assert main(["train", "--resume", "m", "--steps", "10", "--log", "jsonl", "--quiet", "--gen", "0"]) == 0
    assert len(metrics(workdir / "m.metrics.jsonl")) == 10
    assert max(scalars(workdir / "m.tensorboard")["loss/train"]) == 8  # --log jsonl on a resume stops the events


def test_refused_without_the_extra_with_no_save_or_over_a_symlink(workdir, monkeypatch, capsys):
    before = {p.name for p in workdir.iterdir()}
    monkeypatch.setitem(sys.modules, "tensorboardX", None)  # as if the extra were not installed
    assert main(["train", "text.txt", "--steps", "3", "--model", "m", "--log", "tensorboard", *GPT, *TINY]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and 'pip install "microgpt-kit[tensorboard]"' in err
    assert {p.name for p in workdir.iterdir()} == before
    monkeypatch.undo()
    monkeypatch.chdir(workdir)
    need("tensorboardX")
    assert main(["train", "text.txt", "--steps", "3", "--no-save", "--log", "tensorboard", *GPT, *TINY]) == 2
    assert "--log tensorboard does nothing here: nothing is saved with --no-save" in capsys.readouterr().err
    (workdir / "elsewhere").mkdir()
    (workdir / "m.tensorboard").symlink_to(workdir / "elsewhere")
    assert main(["train", "text.txt", "--steps", "3", "--model", "m", "--log", "tensorboard", *GPT, *TINY]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "m.tensorboard is a symlink" in err
    assert not (workdir / "m").exists() and not any((workdir / "elsewhere").iterdir())
    assert {p.name for p in workdir.iterdir()} == before | {"elsewhere", "m.tensorboard"}


def test_a_file_in_the_events_directorys_place_names_log_and_model_in_each_front_ends_words(workdir, capsys):
    need("tensorboardX")
    (workdir / "m.tensorboard").write_text("")
    assert main(["train", "text.txt", "--steps", "3", "--model", "m", "--log", "tensorboard", *GPT, *TINY]) == 2
    line = capsys.readouterr().err.strip().removeprefix("microgpt train: error: ")
    assert line == ("m.tensorboard is not a directory; --log tensorboard writes its event files in a directory of "
                    "that name, so remove it or pick another --model")
    with pytest.raises(ConfigError) as raised:
        microgpt.train("text.txt", steps=3, model="m", log="tensorboard", d_model=16, n_layers=1, backend="numpy",
                       threads=1, seq_len=16, batch_size=4, val_tokens=200, gen=0)
    assert raised.value.key == "model"
    assert str(raised.value) == ("m.tensorboard is not a directory; log='tensorboard' writes its event files in a "
                                 "directory of that name, so remove it or pick another model")
    assert not (workdir / "m").exists()

def test_only_the_writing_process_has_an_events_directory():
    """A process other than the writer (rank > 0) resolves no checkpoint (training/resolve.py), so no events."""
    from pathlib import Path

    from microgpt.training.run_files import RunPaths

    assert RunPaths(None, board=True).tensorboard is None
    assert RunPaths(Path("runs/m"), board=True).tensorboard == Path("runs/m.tensorboard")
    assert RunPaths(Path("runs/m")).tensorboard is None


def test_compare_writes_each_spec_s_events_beside_its_checkpoint(workdir):
    need("tensorboardX")
    assert main(["train", "text.txt", "--compare", "d16n1,d24n1", "--steps", "4", "--model", "cmp", "--log",
                 "tensorboard", *TINY]) == 0
    for spec in ("d16n1", "d24n1"):
        assert_same_figures(scalars(workdir / "cmp" / f"{spec}.tensorboard"),
                            metrics(workdir / "cmp" / f"{spec}.metrics.jsonl"))
