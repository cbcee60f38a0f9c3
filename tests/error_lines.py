"""What the command-line tests read of a failed command: its one line. Bad input is answered in one line that
names the problem and the fix, never a traceback; blank lines and the "backend: " note of --backend auto aside,
stderr holds that line alone."""

from __future__ import annotations


def one_line(err: str) -> str:
    """The one line of a command's stderr `err`."""
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("backend: ")]
    assert len(lines) == 1, err
    return lines[0]


def one_error_line(capsys) -> str:
    """The one line of what the command under test wrote to stderr (pytest's capsys)."""
    return one_line(capsys.readouterr().err)
