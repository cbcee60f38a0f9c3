"""Waiting on what a test started: `wait_for(condition, what)` polls until the condition holds, and `alive(pid)`
says whether a process still runs."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

WAIT_S = 180  # a limit for a hang only: a loaded 2-core machine can take 60 s for what takes one alone


def wait_for(condition, what: str, timeout_s: float = WAIT_S, poll_s: float = 0.1):
    """The first truthy value of `condition()`, polled every `poll_s`; the test fails after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not (found := condition()):
        if time.monotonic() > deadline:
            pytest.fail(f"waited {timeout_s:g} s for {what}")
        time.sleep(poll_s)
    return found


def alive(pid: int) -> bool:
    """Whether a process runs (a zombie, exited but not yet reaped by its new parent, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
