"""examples/addition.py writes the original µGPT's addition data: every sum of 0..99 once, right, shuffled by the
seed, and prompts with right answers, half of them from outside the training range, that `eval --prompts` reads."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from microgpt.use.prompts import read_prompts

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "addition.py"
SUM = re.compile(r"(\d+) \+ (\d+) = (\d+)")


def generate(out: Path, *flags: str) -> tuple[str, str]:
    """(addition.txt, addition-prompts.tsv) as the script, run as a user runs it, writes them into `out`."""
    result = subprocess.run([sys.executable, str(SCRIPT), str(out), *flags], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stderr
    return (out / "addition.txt").read_text(encoding="utf-8"), (out / "addition-prompts.tsv").read_text(encoding="utf-8")


def sums(text: str) -> list[tuple[int, int, int]]:
    found = [SUM.fullmatch(line) for line in text.splitlines()]
    assert all(found), [line for line, match in zip(text.splitlines(), found) if not match][:3]
    return [(int(m[1]), int(m[2]), int(m[3])) for m in found]


def test_every_sum_of_0_to_99_once_and_right(tmp_path):
    text, _ = generate(tmp_path)
    assert text.endswith("\n") and "\n\n" not in text
    lines = sums(text)
    assert len(lines) == 10_000
    assert {(x, y) for x, y, _ in lines} == {(x, y) for x in range(100) for y in range(100)}
    assert all(z == x + y for x, y, z in lines)


def test_the_order_is_the_seeds(tmp_path):
    default, _ = generate(tmp_path / "default")
    assert generate(tmp_path / "zero", "--seed", "0")[0] == default
    assert generate(tmp_path / "zero-again", "--seed", "0")[0] == default
    other, _ = generate(tmp_path / "seven", "--seed", "7")
    assert other != default and sorted(other.splitlines()) == sorted(default.splitlines())
    assert default.splitlines() != sorted(default.splitlines(), key=lambda line: sums(line)[0][:2])  # shuffled


def test_the_prompts_are_training_lines_cut_after_the_equals_sign_with_right_answers(tmp_path):
    text, _ = generate(tmp_path)
    training = set(text.splitlines())
    prompts = read_prompts(tmp_path / "addition-prompts.tsv", 1 << 20)
    assert len(prompts) == 14
    inside = []
    for p in prompts:
        assert p.prompt.startswith("\n") and p.prompt.endswith("=")  # a line's start, as every training line is
        line = p.prompt.removeprefix("\n")
        (x, y, z), = sums(f"{line} {p.answer}")  # the training lines' spacing, and the right sum
        assert z == x + y
        inside.append(f"{line} {p.answer}" in training)
        assert inside[-1] == (x < 100 and y < 100)
    assert inside.count(True) == 7 and inside.count(False) == 7
    assert any(p.prompt == "\n123 + 456 =" for p in prompts) and any(p.prompt == "\n999 + 1 =" for p in prompts)


def test_an_out_dir_that_cannot_be_made_is_one_line(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    result = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "file" / "out")], capture_output=True,
                            text=True, check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"addition.py: error: cannot write in {tmp_path / 'file' / 'out'} (")
    assert line.endswith("); give a writable OUT_DIR")

