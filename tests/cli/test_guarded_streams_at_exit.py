"""The guarded stdout and stderr that a command leaves behind say nothing at exit once the stream under them
is closed: colorama's atexit hook (numba starts colorama while it words an error) keeps the sys.stdout it
found, asks it `closed`, then `isatty`, and printed "Exception ignored ... I/O operation on closed file"
after test runs, whose captured streams pytest closes before the interpreter exits."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from waiting import WAIT_S

LEFT_BEHIND = textwrap.dedent("""
    import atexit, io, sys
    from microgpt.cli.output import guard_output

    captured = io.TextIOWrapper(io.BytesIO())  # as pytest's capture, closed before the interpreter exits
    sys.stdout = sys.stderr = captured
    with guard_output(stdout_required=False):
        kept = sys.stdout, sys.stderr  # what colorama.init() keeps when a command's work starts it
    sys.stdout = sys.stderr = sys.__stderr__
    captured.close()
    atexit.register(lambda: [stream.closed or stream.isatty() for stream in kept])  # colorama's reset_all
""")


def test_a_guarded_stream_over_a_closed_one_says_closed_and_is_no_tty():
    done = subprocess.run([sys.executable, "-c", LEFT_BEHIND], check=False, capture_output=True, text=True,
                          timeout=WAIT_S)
    assert done.returncode == 0 and done.stderr == "", done.stderr
