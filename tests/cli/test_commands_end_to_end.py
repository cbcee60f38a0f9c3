"""The command line end to end, and every kind of bad input answered with one clear line and no traceback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from error_lines import one_error_line
from microgpt.backends import get_backend
from microgpt.cli import main
from microgpt.model.checkpoint import load_checkpoint
from microgpt.model.gpt import GPT
from tiny_corpus import TEXT

TINY = ["--d-model", "12", "--heads", "3", "--n-layers", "1", "--d-ff", "24", "--seq-len", "16", "--quiet"]


def test_train_then_sample(workdir, capsys):
    assert main(["train", "text.txt", *TINY, "--steps", "20", "--model", "ck", "--gen", "30"]) == 0
    out = capsys.readouterr().out
    assert "finished step 20" in out and "checkpoint: ck" in out and "sample:" in out
    assert (workdir / "ck" / "model.safetensors").is_file() and (workdir / "ck" / "config.json").is_file()
    assert main(["sample", "ck", "--prompt", "It was", "--tokens", "40", "--temperature", "0"]) == 0
    text = capsys.readouterr().out
    assert len(text) == 40 + 1  # the 40 characters that follow the prompt, and a newline
    assert set(text) <= set(TEXT) | {"\n"}


def test_train_without_a_file_uses_the_python_docs(workdir, capsys):
    loud = [arg for arg in TINY if arg != "--quiet"]
    assert main(["train", *loud, "--steps", "2", "--gen", "0", "--no-save"]) == 0
    out = capsys.readouterr().out
    assert "pydoc_data" in out and "not saved" in out
    assert not (workdir / "checkpoints").exists()


def test_python_dash_m_runs_the_same_cli(workdir):
    result = subprocess.run([sys.executable, "-m", "microgpt", "--version"], capture_output=True, text=True, check=False)
    assert result.returncode == 0 and result.stdout.startswith("microgpt ")


@pytest.mark.parametrize(
    "setup, expected",
    [
        (lambda d: None, "missing.txt: no such file"),
        (lambda d: (d / "missing.txt").write_text(""), "is empty"),
        (lambda d: (d / "missing.txt").write_text("short"), "has 5 tokens, fewer than seq_len + 1 = 17"),
        (lambda d: (d / "missing.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00"), "looks binary"),
        (lambda d: (d / "missing.txt").write_bytes(b"na\xefve " * 20), "not UTF-8"),
    ],
    ids=["missing", "empty", "short", "binary", "latin1"],
)
def test_bad_training_files(workdir, capsys, setup, expected):
    setup(workdir)
    assert main(["train", "missing.txt", *TINY, "--steps", "1"]) == 2
    assert expected in one_error_line(capsys)


@pytest.mark.parametrize(
    "flags, expected",
    [
        (["--heads", "5"], "--heads 5 does not divide --d-model 12"),
        (["--heads", "fancy"], "not a count, a list of widths or a named set"),
        (["--heads", "4,4", "--d-model", "12"], "makes the width 8, not --d-model 12"),
        (["--val-tokens", "4"], "shorter than one window"),
    ],
)
def test_invalid_model_flags(workdir, capsys, flags, expected):
    args = ["train", "text.txt", *TINY, "--steps", "1"]
    for flag, value in zip(flags[::2], flags[1::2]):  # later flags override the tiny defaults
        args += [flag, value]
    assert main(args) == 2
    assert expected in one_error_line(capsys)


@pytest.mark.parametrize("flag, value", [("--steps", "-3"), ("--lr", "0"), ("--lr", "nan"), ("--batch-size", "x"),
                                         ("--backend", "tpu")])
def test_invalid_flag_values_are_rejected_by_the_parser(workdir, capsys, flag, value):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "text.txt", flag, value])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert flag in err and "Traceback" not in err


def test_named_head_sets_fix_d_model(workdir, capsys):
    assert main(["train", "text.txt", "--heads", "exponential", "--n-layers", "1", "--d-ff", "8", "--seq-len", "16",
                 "--steps", "1", "--no-save", "--gen", "0"]) == 0
    out = capsys.readouterr().out
    assert "d_model 63" in out and "heads [1, 2, 4, 8, 16, 32]" in out


def test_sample_from_a_damaged_checkpoint(workdir, capsys):
    assert main(["train", "text.txt", *TINY, "--steps", "2", "--model", "ck", "--gen", "0"]) == 0
    capsys.readouterr()
    weights = workdir / "ck" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:50])
    assert main(["sample", "ck"]) == 2
    assert "truncated or not a checkpoint" in one_error_line(capsys)
    assert main(["sample", "text.txt"]) == 2
    assert "is a file" in one_error_line(capsys)


def test_resume_with_flags_that_do_not_match_the_checkpoint(workdir, capsys):
    assert main(["train", "text.txt", *TINY, "--steps", "2", "--model", "ck", "--gen", "0"]) == 0
    capsys.readouterr()
    assert main(["train", "text.txt", "--resume", "ck", "--steps", "4", "--d-model", "16", "--quiet"]) == 2
    assert "--d-model 16 does not match the checkpoint ck, which has 12" in one_error_line(capsys)
    assert main(["train", "text.txt", "--resume", "ck", "--steps", "2", "--quiet"]) == 2
    assert "already at step 2" in one_error_line(capsys)


def test_a_nan_loss_stops_and_keeps_the_last_good_checkpoint(workdir, capsys, monkeypatch):
    assert main(["train", "text.txt", *TINY, "--steps", "3", "--model", "ck", "--gen", "0"]) == 0
    before = (workdir / "ck" / "model.safetensors").read_bytes()
    capsys.readouterr()
    real = GPT.loss_and_backward

    def nan_at_step_5(self, windows):
        loss, metrics = real(self, windows)
        return (float("nan") if self.params.step + 1 == 5 else loss), metrics

    monkeypatch.setattr(GPT, "loss_and_backward", nan_at_step_5)
    assert main(["train", "text.txt", "--resume", "ck", "--steps", "10", "--quiet", "--gen", "0"]) == 2
    line = one_error_line(capsys)
    assert "the loss became nan at step 5" in line and "the checkpoint at ck (step 3) was kept as it was" in line
    assert (workdir / "ck" / "model.safetensors").read_bytes() == before


def run_cli_process(workdir, args, prelude=""):
    """Start `microgpt ARGS` in a new Python process, after running `prelude` there."""
    code = textwrap.dedent(prelude) + f"\nfrom microgpt.cli import main\nraise SystemExit(main({args!r}))\n"
    return subprocess.Popen([sys.executable, "-c", code], cwd=workdir, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_ctrl_c_saves_a_checkpoint_and_exits_cleanly(workdir):
    proc = run_cli_process(workdir, ["train", "text.txt", *TINY, "--steps", "1000000", "--model", "ck", "--gen", "0"])
    metrics = workdir / "ck.metrics.jsonl"
    deadline = time.time() + 300  # a limit for a hang only: a loaded machine can take a minute to get going
    while time.time() < deadline and (not metrics.exists() or len(metrics.read_text().splitlines()) < 5):
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    assert metrics.exists() and len(metrics.read_text().splitlines()) >= 5, "the run never got going"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "stopping after this step" in err
    assert "stopped at step" in out
    last_logged = json.loads(metrics.read_text().splitlines()[-1])["step"]
    model, _, info = load_checkpoint(workdir / "ck", get_backend("numpy"), with_optimizer=True)
    assert info["train_state"]["step"] == last_logged == model.params.step


KILL_DURING_WRITE = """
import os, signal
import microgpt.model.checkpoint as checkpoint
real_save_file = checkpoint.save_file
def save_file_then_die(tensors, path, metadata=None):
    real_save_file(tensors, path, metadata=metadata)
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) // 2])  # half the weights are on disk
    os.kill(os.getpid(), signal.SIGKILL)
checkpoint.save_file = save_file_then_die
"""

KILL_BETWEEN_RENAMES = """
import os, signal
real_rename = os.rename
def rename_then_die(src, dst):
    real_rename(src, dst)
    if ".prev-" in os.path.basename(dst):  # the old checkpoint is moved aside, the new one not yet in place
        os.kill(os.getpid(), signal.SIGKILL)
os.rename = rename_then_die
"""


@pytest.mark.parametrize("prelude", [KILL_DURING_WRITE, KILL_BETWEEN_RENAMES], ids=["during-write", "between-renames"])
def test_a_process_killed_while_saving_leaves_the_previous_checkpoint_loadable(workdir, prelude):
    # no validation, so that the only save of the resumed run is the checkpoint's own (no -best)
    assert main(["train", "text.txt", *TINY, "--steps", "3", "--val-tokens", "0", "--model", "ck", "--gen", "0"]) == 0
    good = load_checkpoint(workdir / "ck", get_backend("numpy"))[0].params.to_host()
    proc = run_cli_process(workdir, ["train", "text.txt", "--resume", "ck", "--steps", "6", "--quiet", "--gen", "0"],
                           prelude)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    model, _, info = load_checkpoint(workdir / "ck", get_backend("numpy"), with_optimizer=True)
    assert info["train_state"]["step"] == 3
    assert all(np.array_equal(model.params.to_host()[name], good[name]) for name in good)
    # The next save completes and cleans up whatever the killed one left.
    assert main(["train", "text.txt", "--resume", "ck", "--steps", "6", "--quiet", "--gen", "0"]) == 0
    left = sorted(p.name for p in workdir.iterdir() if p.name.lstrip(".").startswith("ck") and p.name != "ck.loss.png")
    assert left == [".ck.lock", "ck", "ck.metrics.jsonl"]  # no staging or set-aside copy left
    assert os.path.isdir(workdir / "ck")
