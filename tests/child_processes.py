"""Processes a test starts, which must not outlive it: `started(proc)` registers one, and `end_all()` kills
those still running (tests/hostile/conftest.py does after every hostile test, so that a failing test leaves no
million-step run behind)."""

from __future__ import annotations

import subprocess

from waiting import WAIT_S

STARTED: list[subprocess.Popen] = []


def started(proc: subprocess.Popen) -> subprocess.Popen:
    STARTED.append(proc)
    return proc


def end_all() -> None:
    while STARTED:
        proc = STARTED.pop()
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=WAIT_S)
