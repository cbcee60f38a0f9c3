"""Logs a hostile user (or a damaged disk) makes endless: a metrics log or results.jsonl holding gigabytes in
one line, as a file of zeros does (issue 52 items 6 and 7). `microgpt plot` and a resume read the metrics log a
line at a time, a line past MAX_LOG_LINE left out (they read it whole, and under a memory cap said "out of
memory; use a smaller model", which blamed the model for a file read); the studio's speed estimate reads the
tail of results.jsonl (it read it whole). The long lines are holes in sparse files, so they cost no disk; what
reads them runs in a subprocess held to MEMORY of address space, its own peak taken from /proc/self/status."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from memory_limits import GIB, THE_CLI, peak_mb, run_held
from microgpt.cli import main
from microgpt.core.user_files import bounded_lines, read_tail, skip_line

TEXT = "It was the best of times, it was the worst of times.\n" * 30
TINY = ["--d-model", "12", "--heads", "3", "--n-layers", "1", "--d-ff", "24", "--seq-len", "16", "--quiet",
        "--backend", "numpy", "--threads", "1", "--gen", "0"]
HOLE = 2 * 1024**3  # bytes of zeros without a newline: a line no reader may hold whole
MEMORY = 2 * GIB  # the address space a subprocess may take: reading the hole whole needs more
HANG_S = 300


def run_python(code: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`code` in its own interpreter held to MEMORY; it prints its peak resident MB last on stderr."""
    return run_held(code, *args, cwd=cwd, limit=MEMORY, timeout=HANG_S)


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return run_python(THE_CLI, *args, cwd=cwd)


def with_hole_before(path: Path) -> bytes:
    """Put HOLE bytes of zeros (one endless line) before what `path` holds; returns what it held."""
    kept = path.read_bytes()
    with open(path, "wb") as f:
        f.seek(HOLE)
        f.write(b"\n" + kept)
    return kept


@pytest.fixture
def trained(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "text.txt").write_text(TEXT, encoding="utf-8")
    assert main(["train", "text.txt", *TINY, "--steps", "3", "--model", "runs/ck"]) == 0
    return tmp_path / "runs" / "ck"


def test_plot_reads_a_metrics_log_of_gigabytes_of_zeros_a_line_at_a_time(trained, tmp_path):
    pytest.importorskip("matplotlib")
    with_hole_before(tmp_path / "runs" / "ck.metrics.jsonl")
    done = cli("plot", "runs/ck", "--out", "ck.png", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]  # it said "out of memory; use a smaller model"
    assert (tmp_path / "ck.png").stat().st_size > 0 and peak_mb(done) < 1024, done.stderr


def test_a_resume_keeps_its_log_a_line_at_a_time_and_drops_the_endless_line(trained, tmp_path):
    log = tmp_path / "runs" / "ck.metrics.jsonl"
    kept = with_hole_before(log)
    done = cli("train", "text.txt", *TINY, "--steps", "5", "--resume", "runs/ck", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]  # it said "out of memory; use a smaller model"
    steps = [json.loads(line)["step"] for line in log.read_text(encoding="utf-8").splitlines()]
    assert steps == [1, 2, 3, 4, 5] and log.read_bytes().startswith(kept)  # the zeros are gone, the records kept
    assert peak_mb(done) < 1024, done.stderr


def test_the_studios_speed_estimate_reads_the_tail_of_results_jsonl(trained, tmp_path):
    pytest.importorskip("starlette")
    with_hole_before(tmp_path / "runs" / "results.jsonl")
    done = run_python("from microgpt.studio.speed import expected_tokens_per_second\n"
                      "from microgpt.studio.workspace import Workspace\n"
                      "rate, basis = expected_tokens_per_second(1000, Workspace('.'))\n"
                      "print(basis)\ncode = 0", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "the runs in this workspace nearest its size"  # the record after the hole
    assert peak_mb(done) < 300, done.stderr  # the whole file read was 2 GB and more


def test_bounded_lines_leaves_out_a_line_past_its_bound_and_keeps_the_rest(tmp_path):
    path = tmp_path / "log"
    path.write_bytes(b"a\n" + b"x" * 25 + b"\n" + b"b" * 9 + b"\n" + b"y" * 10 + b"c\n" + b"tail")
    with open(path, "rb") as f:
        assert list(bounded_lines(f, 10)) == [b"a\n", b"b" * 9 + b"\n", b"tail"]


def test_read_tail_gives_the_lines_that_start_in_the_last_bytes(tmp_path):
    path = tmp_path / "log"
    path.write_bytes(b"first\nsecond\nthird\n")
    assert read_tail(path, 100) == [b"first", b"second", b"third"]
    assert read_tail(path, len(b"second\nthird\n")) == [b"second", b"third"]  # cut just after a newline
    assert read_tail(path, len(b"econd\nthird\n")) == [b"third"]  # cut inside a line: not a whole one


def test_the_studio_follows_a_log_past_an_endless_line_a_block_at_a_time(tmp_path):
    pytest.importorskip("starlette")
    log = tmp_path / "ck.metrics.jsonl"
    log.write_bytes(b'{"step": 1, "loss": 2.0}\n')
    with open(log, "r+b") as f:  # appended after the studio began to follow it: the hole, then a record
        f.seek(HOLE)
        f.write(b'\n{"step": 2, "loss": 1.5}\n')
    done = run_python("from pathlib import Path\nfrom microgpt.studio.metrics import Tail\n"
                      "tail = Tail(Path('ck.metrics.jsonl'), len(b'{\"step\": 1, \"loss\": 2.0}\\n'), None)\n"
                      "reads = [tail.read() for _ in range(3)]\nprint(reads)\ncode = 0", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]  # it read the 2 GiB at once: a MemoryError
    assert done.stdout.strip() == "[[], [{'step': 2, 'loss': 1.5}], []]"  # past the hole, then the record
    assert peak_mb(done) < 300, done.stderr


def test_a_runs_last_error_is_read_from_the_end_of_its_log(tmp_path):
    pytest.importorskip("starlette")
    with open(tmp_path / "run.log", "wb") as f:
        f.seek(HOLE)
        f.write(b"\nmicrogpt train: error: the disk is full\n")
    done = run_python("from pathlib import Path\nfrom microgpt.studio.runs import last_error\n"
                      "print(last_error(Path('run.log')))\ncode = 0", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]  # it read the whole log: a MemoryError
    assert done.stdout.strip() == "microgpt train: error: the disk is full" and peak_mb(done) < 300, done.stderr


def test_skip_line_reads_past_the_line_and_leaves_the_file_after_it(tmp_path):
    path = tmp_path / "log"
    path.write_bytes(b"x" * 10 + b"\nnext\n")
    with open(path, "rb") as f:
        assert skip_line(f, block=4) == 11 and f.read() == b"next\n"  # its newline found in the third block
        assert skip_line(f) == 0  # at the end: nothing to pass
