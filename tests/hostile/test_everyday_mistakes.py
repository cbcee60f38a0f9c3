"""Everyday mistakes and faults, as a new user meets them: each loses nothing and is answered in one line.

Each test is one hostile case: a --model that is not ours, a diverging run, SIGTERM (also mid-save), a full
disk, a read-only directory, two runs on one checkpoint, a corpus that is a FIFO or a device or too big, a
config.json with absurd shapes, damaged training state, negative seeds and a kill -9 before a resume. The
signal, kill and lock cases run microgpt in subprocesses.

The full-disk and read-only cases use a small tmpfs mounted here when the tests run as root and may mount
(as in CI); elsewhere the full disk is simulated with RLIMIT_FSIZE (a write past the limit fails with EFBIG)
and the read-only case uses a directory without write permission.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from child_processes import started
from error_lines import one_error_line
from microgpt.backends import get_backend
from microgpt.cli import main
from microgpt.model.checkpoint import load_checkpoint
from peak_memory import PeakMemory
from tiny_corpus import TEXT

TINY = ["--d-model", "12", "--heads", "3", "--n-layers", "1", "--d-ff", "24", "--seq-len", "16", "--quiet"]
PROCESS_TIMEOUT = 180  # seconds for any one subprocess: each finishes in a few, a generous bound under load


def train(*args: str) -> int:
    return main(["train", "text.txt", *TINY, "--gen", "0", *args])




def start(workdir: Path, args: list[str], prelude: str = "") -> subprocess.Popen:
    """`microgpt ARGS` in a new Python process, after running `prelude` there."""
    code = textwrap.dedent(prelude) + f"\nfrom microgpt.cli import main\nraise SystemExit(main({args!r}))\n"
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=workdir, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    return started(proc)


def wait_for_steps(metrics: Path, steps: int) -> None:
    deadline = time.time() + PROCESS_TIMEOUT
    while time.time() < deadline and (not metrics.exists() or len(metrics.read_text().splitlines()) < steps):
        time.sleep(0.02)
    assert metrics.exists() and len(metrics.read_text().splitlines()) >= steps, "the run never got going"


def weights(directory: Path) -> dict[str, np.ndarray]:
    return load_file(directory / "model.safetensors")


def long_run(model: str = "ck") -> list[str]:
    return ["train", "text.txt", *TINY, "--preset", "reference", "--steps", "1000000", "--model", model, "--gen", "0"]


# ---- 1. never touch what is not a microgpt checkpoint -----------------------------------------------


def test_a_directory_with_a_config_json_that_is_not_ours_is_refused(workdir, capsys):
    (workdir / "m").mkdir()
    (workdir / "m" / "config.json").write_text("{}")
    (workdir / "m" / "README.md").write_text("notes")
    assert train("--steps", "2", "--model", "m") == 2
    assert "m exists and is not a microgpt checkpoint" in one_error_line(capsys)
    assert (workdir / "m" / "README.md").read_text() == "notes"
    assert sorted(p.name for p in (workdir / "m").iterdir()) == ["README.md", "config.json"]


def test_a_model_path_that_is_a_file_is_refused_before_training(workdir, capsys):
    assert train("--steps", "2", "--model", "text.txt") == 2
    assert "text.txt is a file, not a checkpoint directory" in one_error_line(capsys)
    assert (workdir / "text.txt").read_text() == TEXT and not (workdir / "text.txt.prev").exists()


def test_the_current_directory_and_a_symlink_loop_are_refused(workdir, capsys):
    assert train("--steps", "2", "--model", ".") == 2
    assert "is the current directory" in one_error_line(capsys)
    os.symlink("loop", workdir / "loop")
    assert train("--steps", "2", "--model", "loop") == 2
    assert "symlink" in one_error_line(capsys)
    assert sorted(p.name for p in workdir.iterdir()) == ["loop", "text.txt"]


# ---- 2. a diverged run never replaces a good checkpoint ---------------------------------------------


def test_a_diverging_run_keeps_the_last_good_checkpoint(workdir, capsys):
    assert train("--steps", "3", "--model", "c") == 0
    good = weights(workdir / "c")
    capsys.readouterr()
    assert main(["train", "--resume", "c", "--lr", "1e9", "--save-every", "1", "--steps", "30", "--quiet",
                 "--gen", "0"]) == 2
    line = one_error_line(capsys)
    assert "past the limit" in line and "the checkpoint at c (step 3) was kept as it was" in line
    assert all(np.array_equal(weights(workdir / "c")[k], v) for k, v in good.items())
    assert main(["sample", "c", "--tokens", "5"]) == 0


@pytest.mark.parametrize("poison", [1e9, np.nan], ids=["huge", "nan"])
def test_sample_and_eval_refuse_unsound_weights_in_one_line(workdir, capsys, poison):
    assert train("--steps", "2", "--model", "c") == 0
    tensors = weights(workdir / "c")
    tensors["head.w"][0, 0] = poison
    save_file(tensors, workdir / "c" / "model.safetensors")
    capsys.readouterr()
    assert main(["sample", "c", "--tokens", "5"]) == 2
    assert "head.w" in one_error_line(capsys)
    assert main(["eval", "c", "text.txt"]) == 2
    assert "unusable" in one_error_line(capsys)


def test_eval_of_a_terrible_but_finite_model_reports_an_infinite_perplexity(workdir, capsys):
    assert train("--steps", "2", "--model", "c") == 0
    tensors = weights(workdir / "c")
    rng = np.random.default_rng(0)
    tensors["head.w"] = (9000.0 * rng.choice([-1.0, 1.0], size=tensors["head.w"].shape)).astype(np.float32)
    save_file(tensors, workdir / "c" / "model.safetensors")
    capsys.readouterr()
    assert main(["eval", "c", "text.txt", "--max-positions", "50", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["nll"] > 710 and result["perplexity"] == "inf"


def test_a_new_run_that_fails_over_an_old_checkpoint_keeps_its_log_and_says_so(workdir, capsys):
    assert train("--steps", "5", "--model", "c") == 0
    log = (workdir / "c.metrics.jsonl").read_text()
    capsys.readouterr()
    assert train("--steps", "30", "--model", "c", "--lr", "1e9", "--save-every", "1", "--overwrite") == 2
    assert "the checkpoint at c (step 5) was kept as it was" in one_error_line(capsys)
    assert (workdir / "c.metrics.jsonl").read_text() == log and not (workdir / "c.metrics.jsonl.new").exists()
    assert train("--steps", "3", "--model", "c", "--overwrite") == 0  # a new run that saves replaces the log
    assert len((workdir / "c.metrics.jsonl").read_text().splitlines()) == 3


def test_resume_into_another_directory_that_fails_does_not_claim_it_was_saved(workdir, capsys):
    assert train("--steps", "3", "--model", "a") == 0
    capsys.readouterr()
    assert main(["train", "--resume", "a", "--model", "b", "--steps", "30", "--lr", "1e9", "--save-every", "1",
                 "--quiet", "--gen", "0"]) == 2
    line = one_error_line(capsys)
    assert "no checkpoint had been saved yet" in line and not (workdir / "b").exists()


# ---- 3. SIGTERM is Ctrl-C# ---- 3. SIGTERM is Ctrl-C ---------------------------------------------------------------------------


def test_sigterm_finishes_the_step_saves_and_exits_143(workdir):
    proc = start(workdir, long_run())
    wait_for_steps(workdir / "ck.metrics.jsonl", 5)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=PROCESS_TIMEOUT)
    assert proc.returncode == 143, err
    assert "Traceback" not in err and "SIGTERM: stopping after this step" in err
    last_logged = json.loads((workdir / "ck.metrics.jsonl").read_text().splitlines()[-1])["step"]
    model, _, info = load_checkpoint(workdir / "ck", get_backend("numpy"), with_optimizer=True)
    assert info["train_state"]["step"] == last_logged == model.params.step


SIGTERM_DURING_SAVE = """
import os, signal
import microgpt.model.checkpoint as checkpoint
real_save_file = checkpoint.save_file
def save_file_and_sigterm(tensors, path, metadata=None):
    os.kill(os.getpid(), signal.SIGTERM)  # arrives while the checkpoint is being written
    real_save_file(tensors, path, metadata=metadata)
checkpoint.save_file = save_file_and_sigterm
"""


def test_sigterm_during_a_save_lets_the_save_finish_then_exits_143(workdir):
    proc = start(workdir, long_run()[:-2] + ["--save-every", "4", "--gen", "0"], SIGTERM_DURING_SAVE)
    _, err = proc.communicate(timeout=PROCESS_TIMEOUT)
    assert proc.returncode == 143, err
    model, _, info = load_checkpoint(workdir / "ck", get_backend("numpy"), with_optimizer=True)
    assert info["train_state"]["step"] == model.params.step == 4
    assert not (workdir / "ck.tmp").exists() and not (workdir / "ck.prev").exists()


# ---- 4. full disks and read-only directories --------------------------------------------------------


def _can_mount() -> bool:
    if os.geteuid() != 0:
        return False
    probe = Path(f"/tmp/microgpt-mount-probe-{os.getpid()}")
    probe.mkdir(exist_ok=True)
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(probe)], capture_output=True,
                              check=False)
        if done.returncode == 0:
            subprocess.run(["umount", str(probe)], check=False)
        return done.returncode == 0
    finally:
        probe.rmdir()


CAN_MOUNT = _can_mount()


@pytest.fixture
def mounted(tmp_path):
    """mount(options) -> a fresh tmpfs directory; unmounted afterwards."""
    points = []

    def mount(options: str) -> Path:
        point = tmp_path / f"mnt{len(points)}"
        point.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)], check=True)
        points.append(point)
        return point

    yield mount
    for point in points:
        subprocess.run(["umount", "-l", str(point)], check=False)


FAKE_FREE_SPACE = """
import shutil
from collections import namedtuple
shutil.disk_usage = lambda path: namedtuple("usage", "total used free")(1 << 40, 0, 1 << 40)
"""
FILE_SIZE_LIMIT = """
import resource, signal
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead of killing us
resource.setrlimit(resource.RLIMIT_FSIZE, (150000, 150000))
"""


def test_a_disk_that_fills_during_a_save_keeps_the_previous_checkpoint(workdir, mounted):
    """The first save fits; the second, of a bigger file set, does not. The run fails in one line naming the
    file and the cause, and the checkpoint of the first run is whole, with no ck.tmp left."""
    if CAN_MOUNT:
        disk = mounted("size=256k")
        prelude = FAKE_FREE_SPACE  # get past the up-front space check, to meet the real ENOSPC mid-save
    else:
        disk, prelude = workdir, FAKE_FREE_SPACE + FILE_SIZE_LIMIT
    (disk / "text.txt").write_text(TEXT)
    args = ["train", "text.txt", *TINY, "--gen", "0", "--model", "ck"]
    proc = start(disk, [*args, "--steps", "2", "--d-model", "8", "--heads", "2", "--d-ff", "8"], prelude)
    _, err = proc.communicate(timeout=PROCESS_TIMEOUT)
    assert proc.returncode == 0, err
    good = weights(disk / "ck")
    proc = start(disk, ["train", "text.txt", *TINY, "--gen", "0", "--model", "ck2", "--steps", "2",
                        "--d-model", "96", "--heads", "2", "--d-ff", "384"], prelude)
    _, err = proc.communicate(timeout=PROCESS_TIMEOUT)
    lines = [line for line in err.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert "cannot write" in lines[0] and ("No space left" in lines[0] or "too large" in lines[0])
    assert not (disk / "ck2.tmp").exists() and not (disk / "ck2").exists()
    assert all(np.array_equal(weights(disk / "ck")[k], v) for k, v in good.items())


@pytest.mark.skipif(not CAN_MOUNT, reason="needs root and tmpfs mounts to make a small disk")
def test_a_disk_without_room_for_a_checkpoint_is_refused_before_the_first_step(workdir, mounted, capsys):
    disk = mounted("size=64k")
    assert train("--steps", "2", "--model", str(disk / "ck"), "--d-model", "96", "--d-ff", "384") == 2
    line = one_error_line(capsys)
    assert str(disk) in line and "bytes free" in line
    assert list(disk.iterdir()) == []


def test_a_read_only_directory_is_refused_before_the_first_step(workdir, mounted, capsys):
    if CAN_MOUNT:
        place = mounted("ro,size=64k")
    elif os.geteuid() != 0:
        place = workdir / "ro"
        place.mkdir()
        place.chmod(0o555)
    else:
        pytest.skip("root without tmpfs mounts: permissions do not bind root, so no read-only directory exists")
    assert train("--steps", "2", "--model", str(place / "ck")) == 2
    line = one_error_line(capsys)
    assert f"cannot write in {place}" in line and ("Read-only" in line or "Permission denied" in line)


# ---- 5. one writer per checkpoint directory ---------------------------------------------------------


def test_a_second_run_on_the_same_checkpoint_is_refused_and_a_dead_lock_holder_does_not_block(workdir, capsys):
    first = start(workdir, long_run())
    wait_for_steps(workdir / "ck.metrics.jsonl", 3)
    assert train("--steps", "5", "--model", "ck") == 2
    assert f"ck is being written by process {first.pid}" in one_error_line(capsys)
    first.kill()
    first.communicate(timeout=PROCESS_TIMEOUT)
    lines_before = (workdir / "ck.metrics.jsonl").read_text()
    assert train("--steps", "5", "--model", "ck2") == 0  # another directory was never blocked
    assert train("--steps", "5", "--model", "ck") == 0  # the killed run's lock is gone with it
    assert (workdir / "ck.metrics.jsonl").read_text() != lines_before


# ---- 6. only regular files are corpora --------------------------------------------------------------


def test_a_fifo_a_device_and_an_oversized_file_are_refused(workdir, capsys):
    os.mkfifo(workdir / "pipe")
    for corpus, expected in [("pipe", "not a regular file"), ("/dev/zero", "not a regular file"),
                             ("/dev/urandom", "not a regular file")]:
        assert main(["train", corpus, *TINY, "--steps", "1", "--no-save", "--gen", "0"]) == 2
        assert expected in one_error_line(capsys)
    assert train("--steps", "1", "--no-save", "--max-corpus", "1KiB") == 2
    assert "over the 1,024-byte corpus cap; raise --max-corpus" in one_error_line(capsys)
    assert train("--steps", "1", "--no-save", "--max-corpus", "1MiB") == 0
    assert train("--steps", "2", "--model", "c") == 0
    capsys.readouterr()
    assert main(["eval", "c", "pipe"]) == 2
    assert "not a regular file" in one_error_line(capsys)


# ---- 7. a checkpoint's config is checked before anything is allocated -------------------------------


@pytest.mark.parametrize("field,value", [("d_model", 10**9), ("n_layers", 10**12), ("seq_len", 10**9),
                                         ("d_ff", "wide")])
def test_an_absurd_config_is_one_line_naming_the_field(workdir, capsys, field, value):
    assert train("--steps", "2", "--model", "c") == 0
    config = json.loads((workdir / "c" / "config.json").read_text())
    (workdir / "c" / "config.json").write_text(json.dumps({**config, "model": {**config["model"], field: value}}))
    capsys.readouterr()
    with PeakMemory() as memory:  # what it allocated, not how long it took (load stretches that)
        assert main(["sample", "c", "--tokens", "3"]) == 2
    assert str(value) in one_error_line(capsys)  # the line shows the absurd value
    # a model of that size would take gigabytes at least; starting the backend (numba compiling its kernels on a
    # first run) takes tens of megabytes
    assert memory.bytes < 2**30, f"{memory.bytes:,} bytes: the check must come before the model's allocation"


# ---- 9. no tracebacks for everyday mistakes ---------------------------------------------------------


def test_negative_seeds_are_one_line(workdir, capsys):
    with pytest.raises(SystemExit) as exit_info:
        train("--steps", "1", "--no-save", "--seed", "-1")
    assert exit_info.value.code == 2 and "--seed" in capsys.readouterr().err
    assert train("--steps", "2", "--model", "c") == 0
    with pytest.raises(SystemExit) as exit_info:
        main(["sample", "c", "--seed", "-3"])
    assert exit_info.value.code == 2 and "--seed" in capsys.readouterr().err


@pytest.mark.parametrize("damage", ["train_state_without_keys", "optimizer_header", "optimizer_truncated"])
def test_damaged_training_state_stops_a_resume_in_one_line(workdir, capsys, damage):
    assert train("--steps", "2", "--model", "c") == 0
    if damage == "train_state_without_keys":
        (workdir / "c" / "train_state.json").write_text(json.dumps({"adam_step": 2}))
    elif damage == "optimizer_header":
        raw = (workdir / "c" / "optimizer.safetensors").read_bytes()
        (workdir / "c" / "optimizer.safetensors").write_bytes(raw[:8] + b"{garbage" + raw[16:])
    else:
        raw = (workdir / "c" / "optimizer.safetensors").read_bytes()
        (workdir / "c" / "optimizer.safetensors").write_bytes(raw[: len(raw) // 3])
    capsys.readouterr()
    assert main(["train", "--resume", "c", "--steps", "4", "--quiet", "--gen", "0"]) == 2
    line = one_error_line(capsys)
    assert "c" in line and ("damaged" in line or "truncated" in line)


# ---- 10. the metrics log after a kill and a resume -------------------------------------------------


def test_after_kill_9_and_resume_the_metrics_log_has_each_step_once(workdir):
    proc = start(workdir, long_run()[:-2] + ["--save-every", "5", "--gen", "0"])
    wait_for_steps(workdir / "ck.metrics.jsonl", 8)
    proc.kill()
    proc.communicate(timeout=PROCESS_TIMEOUT)
    saved_step = load_checkpoint(workdir / "ck", get_backend("numpy"), with_optimizer=True)[0].params.step
    assert saved_step % 5 == 0 and saved_step >= 5
    assert main(["train", "--resume", "ck", "--steps", str(saved_step + 6), "--quiet", "--gen", "0"]) == 0
    records = [json.loads(line) for line in (workdir / "ck.metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(1, saved_step + 7))
    times = [r["time"] for r in records]
    assert times == sorted(times), "a resumed run's times go on from the log's, never back"



def test_a_save_killed_inside_safetensors_does_not_block_the_next_run(workdir):
    # safetensors writes each file as .tmpXXXXXX and renames it; a kill -9 in between leaves that file
    partial = workdir / "ck.tmp"
    partial.mkdir()
    (partial / "config.json").write_text("{}")
    (partial / ".tmpSpDikO").write_bytes(b"\0" * 10)
    assert main(["train", "text.txt", *TINY, "--steps", "2", "--model", "ck", "--quiet", "--gen", "0"]) == 0
