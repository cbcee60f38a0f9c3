"""The batch scripts in examples/slurm/ are what docs/cluster.md says: bash that parses, with `--requeue`,
a `--signal` warning, `srun --mpi=pmi2` and `--resume auto`, and a `microgpt train` line the real parser takes.
(tests/parallel/test_slurm.py runs the same pattern on a real Slurm.)"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from microgpt.cli import build_parser

SCRIPTS = sorted((Path(__file__).resolve().parents[2] / "examples" / "slurm").glob("*.sbatch"))


def test_there_are_three_examples():
    assert [script.stem for script in SCRIPTS] == ["gpus_nccl", "multi_node", "one_node"]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda script: script.stem)
def test_example_is_a_requeueable_batch_script(script):
    text = script.read_text()
    assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0
    for needed in ("#SBATCH --requeue", "#SBATCH --signal=B:USR1@", "srun --mpi=pmi2 microgpt train", "--resume auto"):
        assert needed in text, f"{script.name} lacks {needed!r}"
    line = text.replace("\\\n", " ").split("srun --mpi=pmi2 microgpt ", 1)[1].split("\n", 1)[0]
    args = build_parser()[0].parse_args(shlex.split(line.rstrip("& ")))
    assert args.command == "train" and args.resume == "auto"
