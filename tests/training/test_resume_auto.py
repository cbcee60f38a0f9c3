"""A run never starts over an unfinished checkpoint in silence, and `--resume auto` continues the one in --model
or starts a new run there (issue 21, items 1 and 2): the line that goes in a batch script that is requeued.

An unfinished checkpoint is made the way a scheduler makes one: a --steps 20 run gets a real SIGTERM (raised in
the test process just after step 10, from the progress update), finishes the step, saves and exits 143.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

import microgpt
from extras import need
from microgpt.cli import main
from microgpt.core.errors import ConfigError
from microgpt.core.progress import Progress

SHAPE = ["--d-model", "12", "--heads", "3", "--n-layers", "1", "--d-ff", "24", "--seq-len", "16"]
TINY = ["text.txt", *SHAPE, "--backend", "numpy", "--threads", "1", "--gen", "0", "--quiet"]


@pytest.fixture
def workdir(workdir, monkeypatch):
    """tests/conftest.py's, outside any Slurm job."""
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)
    return workdir


@contextlib.contextmanager
def sigterm_after(monkeypatch, step: int):
    """Within: a real SIGTERM to this process just after each run's `step` (from its progress update)."""
    update = Progress.update

    def update_then_stop(self, at: int, *rest) -> None:
        update(self, at, *rest)
        if at == step:
            signal.raise_signal(signal.SIGTERM)

    with monkeypatch.context() as patch:
        patch.setattr(Progress, "update", update_then_stop)
        yield


def stopped_at(monkeypatch, step: int, *args: str) -> None:
    """Train `args` (a --steps 20 run) and SIGTERM it just after `step`: it saves there and exits 143."""
    with sigterm_after(monkeypatch, step):
        assert main(["train", *TINY, "--steps", "20", *args]) == 128 + signal.SIGTERM
    checkpoint = Path(args[args.index("--model") + 1]) if "--model" in args else Path("checkpoints/text")
    assert json.loads((checkpoint / "train_state.json").read_text())["step"] == step


def files(root: Path) -> dict[str, bytes]:
    """Every file under `root`, by path, with its bytes: what a refused run must leave as it was."""
    return {str(path.relative_to(root)): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err and len(lines) == 1, err
    return lines[0].removeprefix("microgpt train: error: ")


def out_lines(capsys) -> list[str]:
    return capsys.readouterr().out.splitlines()


def tensors(checkpoint: Path) -> dict[str, np.ndarray]:
    """The weights and Adam moments (the files' bytes differ by each save's random id)."""
    return {**load_file(checkpoint / "model.safetensors"), **load_file(checkpoint / "optimizer.safetensors")}


def same_tensors(a: Path, b: Path) -> bool:
    first, second = tensors(a), tensors(b)
    return first.keys() == second.keys() and all(np.array_equal(first[name], second[name]) for name in first)


def logged_losses(checkpoint: Path) -> list[float]:
    return [json.loads(line)["loss"] for line in Path(f"{checkpoint}.metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("where, checkpoint", [(["--model", "ck"], "ck"), ([], "checkpoints/text")])
def test_a_new_run_over_an_unfinished_checkpoint_is_refused_and_writes_nothing(workdir, monkeypatch, capsys, where,
                                                                               checkpoint):
    stopped_at(monkeypatch, 10, *where)
    before = files(workdir)
    capsys.readouterr()
    assert main(["train", *TINY, "--steps", "20", *where]) == 2
    assert one_error_line(capsys) == (f"{checkpoint} holds an unfinished run (step 10 of 20); continue it with "
                                      f"--resume {checkpoint}, or start again with --overwrite")
    assert files(workdir) == before


def test_overwrite_starts_the_unfinished_run_again_and_says_so(workdir, monkeypatch, capsys):
    stopped_at(monkeypatch, 10, "--model", "ck")
    capsys.readouterr()
    assert main(["train", *TINY, "--steps", "20", "--model", "ck", "--overwrite"]) == 0
    assert "note: replacing the unfinished checkpoint ck (step 10 of 20; --overwrite)" in out_lines(capsys)
    assert main(["train", *TINY, "--steps", "20", "--model", "fresh"]) == 0
    assert same_tensors(Path("ck"), Path("fresh"))  # trained from step 0, as a run in a new place is
    assert logged_losses(Path("ck")) == logged_losses(Path("fresh"))


def test_a_fine_tuning_run_over_an_unfinished_one_is_refused_too(workdir, monkeypatch, capsys):
    assert main(["train", *TINY, "--steps", "10", "--model", "base"]) == 0
    stopped_at(monkeypatch, 10, "--init-from", "base", "--model", "tuned")
    before = files(workdir)
    capsys.readouterr()
    assert main(["train", *TINY, "--steps", "20", "--init-from", "base", "--model", "tuned"]) == 2
    assert one_error_line(capsys).startswith("tuned holds an unfinished run (step 10 of 20)")
    assert files(workdir) == before


def test_a_finished_checkpoint_is_replaced_only_with_overwrite_and_a_note(workdir, capsys):
    assert main(["train", *TINY, "--steps", "10", "--model", "ck"]) == 0
    before = files(workdir)
    capsys.readouterr()
    assert main(["train", *TINY, "--steps", "3", "--model", "ck", "--seed", "7"]) == 2  # a smoke test's wipe
    assert one_error_line(capsys) == ("ck holds a finished run (step 10); train it on with --resume ck --steps 1010, "
                                      "start again with --overwrite, or pick another --model")
    assert files(workdir) == before
    assert main(["train", *TINY, "--steps", "10", "--model", "ck", "--seed", "7", "--overwrite"]) == 0
    lines = out_lines(capsys)
    assert lines[0] == "note: replacing the finished checkpoint ck (step 10; --overwrite)"
    assert lines[1].startswith("finished step 10")


def test_a_finished_run_at_name_best_is_not_replaced_by_names_best_copy(workdir, capsys):
    """A run named NAME writes NAME-best: a finished checkpoint already there (another run's) is not wiped."""
    assert main(["train", *TINY, "--steps", "10", "--model", "ck-best"]) == 0
    before = files(workdir)
    capsys.readouterr()
    assert main(["train", *TINY, "--steps", "10", "--model", "ck", "--val-tokens", "100"]) == 2
    assert one_error_line(capsys).startswith("ck-best holds a finished run (step 10)")
    assert files(workdir) == before


def test_a_weights_only_checkpoint_counts_as_finished_and_cannot_be_resumed(workdir, capsys):
    """Without train_state.json nothing records an unfinished run, and nothing could continue one."""
    assert main(["train", *TINY, "--steps", "10", "--model", "ck"]) == 0
    (workdir / "ck" / "train_state.json").unlink()
    (workdir / "ck" / "optimizer.safetensors").unlink()
    before = files(workdir)
    capsys.readouterr()
    assert main(["train", *TINY, "--steps", "10", "--model", "ck", "--resume", "auto"]) == 2
    assert one_error_line(capsys) == ("ck holds weights only (no optimizer state), so it cannot be resumed; fine-tune "
                                      "it with --init-from ck --model NEW, or train a new model in its place without "
                                      "--resume")
    assert files(workdir) == before
    assert main(["train", *TINY, "--steps", "10", "--model", "ck"]) == 2
    assert one_error_line(capsys) == "ck holds weights only (no training state); start again with --overwrite, or " \
                                     "pick another --model"
    assert main(["train", *TINY, "--steps", "10", "--model", "ck", "--overwrite"]) == 0
    assert ("note: replacing the checkpoint ck (weights only, no training state to resume; --overwrite)"
            in out_lines(capsys))


def test_a_damaged_training_state_is_not_guessed_finished(workdir, capsys):
    assert main(["train", *TINY, "--steps", "10", "--model", "ck"]) == 0
    (workdir / "ck" / "train_state.json").write_text("{not json")
    capsys.readouterr()
    assert main(["train", *TINY, "--steps", "10", "--model", "ck"]) == 2
    assert one_error_line(capsys) == ("ck/train_state.json cannot be read, so whether its run finished is unknown; "
                                      "start again with --overwrite, or pick another --model")
    assert main(["train", *TINY, "--steps", "10", "--model", "ck", "--overwrite"]) == 0


def test_a_best_checkpoint_left_alone_by_a_killed_run_is_not_removed_in_silence(workdir, monkeypatch, capsys):
    """A run killed (SIGKILL: no save) before its first save leaves only its -best, which a new run would remove;
    the way out the message gives works as written."""
    stopped_at(monkeypatch, 10, "--model", "ck")
    shutil.rmtree(workdir / "ck")
    best_step = json.loads((workdir / "ck-best" / "train_state.json").read_text())["step"]
    capsys.readouterr()
    assert main(["train", *TINY, "--steps", "20", "--model", "ck"]) == 2
    assert one_error_line(capsys) == (f"ck-best holds the best checkpoint (step {best_step} of 20) of a run that never "
                                      "saved ck; continue it with --resume ck-best --model ck, or start again with "
                                      "--overwrite")
    assert main(["train", *TINY, "--resume", "ck-best", "--model", "ck"]) == 0
    assert json.loads((workdir / "ck" / "train_state.json").read_text())["step"] == 20


def test_compare_checks_every_spec_directory_before_the_first_trains(workdir, monkeypatch, capsys):
    compare = ["text.txt", "--compare", "d8n1,d12n1", "--seq-len", "16", "--backend", "numpy", "--threads", "1",
               "--gen", "0", "--quiet", "--model", "cmp", "--steps", "20"]
    with sigterm_after(monkeypatch, 10):  # the first spec stops at step 10; the second never starts
        assert main(["train", *compare]) == 128 + signal.SIGTERM
    before = files(workdir)
    capsys.readouterr()
    assert main(["train", *compare]) == 2
    assert one_error_line(capsys) == ("cmp/d8n1 holds an unfinished run (step 10 of 20); continue it with --resume "
                                      "cmp/d8n1, or start again with --overwrite")
    assert files(workdir) == before
    assert main(["train", *compare, "--overwrite"]) == 0
    assert out_lines(capsys)[0] == "note: replacing the unfinished checkpoint cmp/d8n1 (step 10 of 20; --overwrite)"
    assert main(["train", *compare]) == 2
    assert one_error_line(capsys).startswith("cmp/d8n1 holds a finished run (step 20)")
    assert main(["train", *compare, "--overwrite"]) == 0
    assert out_lines(capsys)[:2] == ["note: replacing the finished checkpoint cmp/d8n1 (step 20; --overwrite)",
                                     "note: replacing the finished checkpoint cmp/d12n1 (step 20; --overwrite)"]


def test_resume_auto_starts_a_new_run_where_there_is_no_checkpoint(workdir, capsys):
    assert main(["train", *TINY, "--steps", "10", "--model", "ck", "--resume", "auto"]) == 0
    lines = out_lines(capsys)
    assert lines[0] == "--resume auto: no checkpoint in ck yet; starting a new run there"
    assert lines[1].startswith("finished step 10 (10 this run)")
    assert main(["train", *TINY, "--steps", "10", "--model", "fresh"]) == 0
    assert same_tensors(Path("ck"), Path("fresh"))


def test_resume_auto_continues_bit_identically_to_resume_dir(workdir, monkeypatch, capsys):
    stopped_at(monkeypatch, 10, "--model", "a")
    shutil.copytree(workdir / "a", workdir / "b")
    shutil.copy(workdir / "a.metrics.jsonl", workdir / "b.metrics.jsonl")
    capsys.readouterr()
    assert main(["train", *TINY, "--resume", "a"]) == 0
    assert main(["train", *TINY, "--model", "b", "--resume", "auto"]) == 0
    assert "--resume auto: resuming b from step 10" in out_lines(capsys)
    assert json.loads((workdir / "b" / "train_state.json").read_text())["step"] == 20
    assert same_tensors(Path("a"), Path("b"))
    assert logged_losses(Path("a")) == logged_losses(Path("b"))


@pytest.mark.parametrize("steps", [["--steps", "10"], []])
def test_resume_auto_of_a_finished_run_says_so_and_exits_0_without_writing(workdir, capsys, steps):
    """A requeued batch script that already finished: nothing to train is success (--resume DIR would refuse)."""
    assert main(["train", *TINY, "--steps", "10", "--model", "ck"]) == 0
    before = files(workdir)
    capsys.readouterr()
    assert main(["train", *TINY, *steps, "--model", "ck", "--resume", "auto", "--gen", "50"]) == 0
    assert out_lines(capsys) == ["--resume auto: ck is finished at step 10 (--steps 10); nothing to train"]
    assert files(workdir) == before
    assert main(["train", *TINY, *steps, "--resume", "ck"]) == 2
    assert one_error_line(capsys).startswith("ck is already at step 10; ask for more with --steps")


def test_under_slurm_resume_auto_names_the_job_the_restart_and_the_step(workdir, monkeypatch, capsys):
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    assert main(["train", *TINY, "--steps", "10", "--model", "new", "--resume", "auto"]) == 0
    assert out_lines(capsys)[0] == "slurm job 4242, restart 0: no checkpoint in new yet; starting a new run there"
    stopped_at(monkeypatch, 10, "--model", "ck")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "3")
    capsys.readouterr()
    assert main(["train", *TINY, "--model", "ck", "--resume", "auto"]) == 0
    assert out_lines(capsys)[0] == "slurm job 4242, restart 3: resuming ck from step 10"
    assert main(["train", *TINY, "--model", "ck", "--resume", "auto"]) == 0
    assert out_lines(capsys) == ["slurm job 4242, restart 3: ck is finished at step 20 (--steps 20); nothing to train"]


@pytest.mark.parametrize("flags, expected", [
    (["--d-model", "16", "--heads", "4"], ("--d-model 16 does not match the checkpoint ck, which has 12; drop it to "
                                          "resume, or train a new model with --model")),
    (["--tokenizer", "bpe"], ("--tokenizer bpe does not match the checkpoint ck, whose tokenizer is char; drop it to "
                             "resume, or train a new model with --model")),
])
def test_resume_auto_holds_the_flags_to_the_checkpoint_as_resume_does(workdir, monkeypatch, capsys, flags, expected):
    stopped_at(monkeypatch, 10, "--model", "ck")
    before = files(workdir)
    capsys.readouterr()
    assert main(["train", *TINY, "--model", "ck", "--resume", "auto", *flags]) == 2
    assert one_error_line(capsys) == expected
    assert files(workdir) == before


@pytest.mark.parametrize("flags, expected", [
    (["--resume", "auto"], ("--resume auto needs --model DIR: the checkpoint to continue, or the place to start a "
                           "new run when there is none yet")),
    (["--resume", "auto", "--no-save"], ("--resume auto continues or starts the checkpoint in --model DIR, and "
                                        "--no-save saves nothing; drop --no-save, or continue a checkpoint unsaved "
                                        "with --resume DIR")),
    (["--resume", "auto", "--model", "ck", "--overwrite"], ("--overwrite starts a new run over the checkpoint in "
                                                           "--model and --resume continues one; give one of them")),
    (["--resume", "ck", "--overwrite"], ("--overwrite starts a new run over the checkpoint in --model and --resume "
                                        "continues one; give one of them")),
    (["--no-save", "--overwrite"], "--overwrite does nothing with --no-save: nothing is saved; drop one of them"),
    (["--resume", "auto", "--model", "notes"], ("notes exists and is not a microgpt checkpoint (it holds other "
                                               "files); saving would replace them; pick another --model or empty it")),
])
def test_bad_input_is_one_line(workdir, capsys, flags, expected):
    (workdir / "notes").mkdir()
    (workdir / "notes" / "todo.txt").write_text("mine")
    assert main(["train", *TINY, "--steps", "10", *flags]) == 2
    assert one_error_line(capsys) == expected
    assert sorted(path.name for path in workdir.iterdir()) == ["notes", "text.txt"]


def test_resume_auto_of_a_named_run_uses_its_model_and_names_the_key_when_missing(workdir, capsys):
    (workdir / "runs.yaml").write_text("runs:\n  placed:\n    model: out/placed\n  unplaced:\n    steps: 10\n")
    named = [*TINY, "--steps", "10", "--config", "runs.yaml", "--resume", "auto"]
    assert main(["train", *named, "--run", "placed"]) == 0
    assert out_lines(capsys)[0] == "--resume auto: no checkpoint in out/placed yet; starting a new run there"
    assert main(["train", *named, "--run", "placed"]) == 0
    assert out_lines(capsys) == ["--resume auto: out/placed is finished at step 10 (--steps 10); nothing to train"]
    assert main(["train", *named, "--run", "unplaced"]) == 2
    assert one_error_line(capsys).startswith("--resume auto needs --model DIR (or model: in run unplaced in runs.yaml)")


def test_a_directory_named_auto_is_resumed_as_dot_slash_auto(workdir, monkeypatch):
    stopped_at(monkeypatch, 10, "--model", "auto")
    assert main(["train", *TINY, "--resume", "./auto"]) == 0
    assert json.loads((workdir / "auto" / "train_state.json").read_text())["step"] == 20


def test_the_python_api_takes_overwrite_and_resume_auto(workdir, monkeypatch):
    stopped_at(monkeypatch, 10, "--model", "ck")
    settings = {"d_model": 12, "heads": 3, "n_layers": 1, "d_ff": 24, "seq_len": 16, "backend": "numpy",
                "threads": 1, "model": "ck", "steps": 20}
    with pytest.raises(ConfigError) as refused:
        microgpt.train("text.txt", **settings)
    assert str(refused.value) == ("ck holds an unfinished run (step 10 of 20); continue it with resume='ck', or start "
                                  "again with overwrite=True")  # the keywords train takes, as Python says them
    run, summary = microgpt.train("text.txt", resume="auto", **settings)
    assert run.resumed and summary.steps == 20 and summary.steps_run == 10
    before = files(workdir)
    run, summary = microgpt.train("text.txt", resume="auto", **settings)
    assert run.done and summary.steps == 20 and summary.steps_run == 0 and files(workdir) == before
    run, summary = microgpt.train("text.txt", overwrite=True, **settings)
    assert summary.steps_run == 20 and run.notes == ["replacing the finished checkpoint ck (step 20; overwrite=True)"]


def test_under_procs_rank_0_refuses_for_every_rank_and_resume_auto_continues(workdir, monkeypatch):
    need("mpi4py")
    from microgpt.parallel.launch import child_environment, find_mpiexec

    try:
        find_mpiexec()
    except Exception as exc:  # noqa: BLE001 - the reason is shown in the skip
        pytest.skip(str(exc))
    stopped_at(monkeypatch, 10, "--model", "ck")
    before = files(workdir)
    command = [sys.executable, "-m", "microgpt", "train", *TINY, "--steps", "20", "--model", "ck"]
    result = subprocess.run([*command, "--procs", "2"], check=False, env=child_environment(), capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert [line for line in result.stderr.splitlines() if line.strip()] == [
        ("microgpt train: error: ck holds an unfinished run (step 10 of 20); continue it with --resume ck, or start "
        "again with --overwrite")]
    assert files(workdir) == before
    result = subprocess.run([*command, "--resume", "auto", "--procs", "2"], check=False, env=child_environment(),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "--resume auto: resuming ck from step 10"
    assert "finished step 20 (10 this run)" in result.stdout
