"""`prepare` against input and disks made to hang it or exhaust it, each answered with one line in bounded time
and memory (issue 52): a compressed file that expands without end, a JSON Lines line without end, a disk that
fills while two workers run. Each CLI run that could hang is a child with a timeout, so a regression fails
instead of hanging the suite; memory is the child's peak resident size, never a time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import needs
from microgpt.cli import main
from microgpt.data.prepare import blocks

NEEDS_ZSTD = needs("zstandard")
CHILD_ENV = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
MEASURED = """import resource, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
sys.stdout.write(done.stderr)
print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)
"""


def measured(args: list[str], cwd: Path, timeout: float = 240) -> tuple[int, str, int]:
    """Run `args` in a child of a child that reports its peak resident bytes (its own children's only, so no
    earlier test's child counts): (exit status, its stderr, peak bytes)."""
    done = subprocess.run([sys.executable, "-c", MEASURED, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=CHILD_ENV, check=True)
    *err, last = done.stdout.rstrip("\n").split("\n")
    code, peak = map(int, last.split())
    return code, "\n".join(err), peak


def one_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


def zst_of(path: Path, chunk: bytes, repeat: int) -> Path:
    import zstandard

    with open(path, "wb") as f, zstandard.ZstdCompressor().stream_writer(f) as writer:
        for _ in range(repeat):
            writer.write(chunk)
    return path


@NEEDS_ZSTD
@pytest.mark.parametrize("byte", [b"\0", b"\n"])
def test_a_zst_that_expands_without_end_is_refused_in_bounded_memory(byte, tmp_path):
    """1 GiB of zeros (or of newlines, blank lines) in a 32 KB .jsonl.zst: a line of zeros was gathered whole
    (4 GB: still going after 180 s at 1 GB), a billion blank lines read one by one (past 120 s). Now one line
    once the file passes a thousand times its size, and prepare stays small."""
    zst_of(tmp_path / "bomb.jsonl.zst", byte * 2**24, 64)
    code, err, peak = measured([sys.executable, "-m", "microgpt", "prepare", "bomb.jsonl.zst", "--out", "out",
                                "--quiet"], tmp_path)
    assert code == 2, err
    line = one_line(err)
    assert "bomb.jsonl.zst decompresses to more than" in line and "over 1,000 times its" in line, line
    assert peak < 512 * 2**20, f"{peak / 2**20:.0f} MiB"
    assert sorted(os.listdir(tmp_path)) == ["bomb.jsonl.zst"]


def test_a_json_lines_line_past_the_limit_is_refused_naming_it(tmp_path, monkeypatch, capsys):
    """A line is gathered whole before it is parsed: one longer than MAX_LINE_BYTES is refused as it grows."""
    monkeypatch.setattr(blocks, "BLOCK_BYTES", 1000)
    monkeypatch.setattr(blocks, "MAX_LINE_BYTES", 3000)
    (tmp_path / "a.jsonl").write_text(json.dumps({"text": "fine"}) + "\n" + json.dumps({"text": "x" * 5000}) + "\n")
    assert main(["prepare", str(tmp_path / "a.jsonl"), "--out", str(tmp_path / "out"), "--quiet", "--workers", "1"]) == 2
    line = one_line(capsys.readouterr().err)
    assert "a.jsonl line 2 is longer than 3,000 bytes" in line, line
    assert not (tmp_path / "out").exists()
