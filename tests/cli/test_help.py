"""`--help` and `-h` work for the command and every subcommand, in-process and as a user types them."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from microgpt.cli import build_parser, main


def subcommands() -> list[str]:
    """Every subcommand the parser knows, read from the parser itself (so a new one is covered)."""
    actions = [a for a in build_parser()[0]._actions if isinstance(a, argparse._SubParsersAction)]
    return sorted(actions[0].choices)


def test_every_subcommand_is_found():
    assert {"train", "sample", "eval", "plot"} <= set(subcommands())


@pytest.mark.parametrize("flag", ["--help", "-h"])
@pytest.mark.parametrize("command", [[], *[[name] for name in subcommands()]])
def test_help_prints_and_exits_0(command, flag, capsys):
    with pytest.raises(SystemExit) as stop:
        main([*command, flag])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: microgpt") and len(out.splitlines()) > 3


def test_help_as_a_subprocess():
    result = subprocess.run([sys.executable, "-m", "microgpt", "train", "--help"], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stderr
    assert "--procs" in result.stdout and "Traceback" not in result.stderr
