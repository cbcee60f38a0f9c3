"""A studio under test: the token and port the in-process `Studio` fixtures of tests/conftest.py serve with, a
real `microgpt studio` process started and stopped as a user does (Ctrl-C), and what a test reads of a run's
files and of an answer."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from microgpt.model.checkpoint import TRAIN_STATE, is_checkpoint
from microgpt.training.run_files import RunPaths
from waiting import WAIT_S

TOKEN = "test-token"
PORT = 8765


def start_studio(workspace: Path, *flags: str) -> tuple[subprocess.Popen, str]:
    """A `microgpt studio` process on the workspace and the URL it printed."""
    process = subprocess.Popen([sys.executable, "-m", "microgpt", "studio", str(workspace), "--port", "0",
                                "--no-browser", *flags], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = process.stdout.readline()
    found = re.search(r"http://\S+", line)
    if found is None:
        process.kill()
        pytest.fail(f"microgpt studio printed no URL: {line!r} {process.stderr.read()}")
    return process, found.group(0)


def stop_studio(process: subprocess.Popen) -> tuple[str, str]:
    """Ctrl-C to a studio process: it must stop cleanly (exit 0). Its (stdout, stderr)."""
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=WAIT_S)
    assert process.returncode == 0, err
    return out, err


def http_client(url: str):
    """An httpx client of the studio at `url` (the URL it printed), sending its token."""
    import httpx

    token = re.search(r"token=([^&\s]+)", url).group(1)
    return httpx.Client(base_url=url.split("/?")[0], headers={"X-Studio-Token": token}, timeout=WAIT_S)


def logged_steps(checkpoint: Path) -> list[int]:
    log = RunPaths(checkpoint).metrics
    lines = log.read_text(encoding="utf-8").splitlines() if log.is_file() else []
    return [json.loads(line)["step"] for line in lines if line.endswith("}")]


def saved_step(checkpoint: Path) -> int | None:
    if not is_checkpoint(checkpoint):
        return None
    return json.loads((checkpoint / TRAIN_STATE).read_text(encoding="utf-8"))["step"]


def one_line_error(answer, status: int) -> str:
    """The error of an answer that must have `status`: one line, no traceback."""
    assert answer.status_code == status, answer.text
    message = answer.json()["error"]
    assert "\n" not in message and "Traceback" not in message
    return message
