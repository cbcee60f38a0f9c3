"""The training runs a studio starts: each a `microgpt train` subprocess of a named run of studio.yaml.

A run is started with an argument list (never a shell) from a name that `check_run_name` allows, in the
workspace as its working directory, with its own session so that a Ctrl-C meant for the studio does not reach
it, and its output in `.studio/logs/NAME.log`. Before it starts, its checkpoint directory's writer lock
(run_dir.WriterLock) is tried, so a run that another process writes is refused at once with that lock's
message. Stopping sends SIGTERM, on which train finishes its step, saves and exits. Runs may train at once
while their threads fit in the cores (a run without --threads counts as every core). A run still training
that this studio did not start (one whose studio was killed, or one started from a shell) is found by its
checkpoint's writer lock (`others`), shown, and can be stopped the same way.
"""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from microgpt.core.errors import ConfigError
from microgpt.model.checkpoint import TRAIN_STATE, read_small
from microgpt.model.graph.document import read_document
from microgpt.settings.named_runs import load_all_runs, load_run
from microgpt.settings.sources import Settings
from microgpt.studio.names import guard_name
from microgpt.studio.progress import Progress
from microgpt.training.run_dir import WriterLock
from microgpt.training.run_files import DEFAULT_ROOT, open_own

RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
STOPPED_BY_SIGTERM = (128 + signal.SIGTERM, -signal.SIGTERM)  # train's status after saving; killed before its handler
ERROR_MARK = "error: "  # how the CLI starts its one line about a user error
LOG_TAIL_LINES = 80  # the lines of a run's output the page shows under a failed run
LOG_TAIL_BYTES = 64 * 1024


def check_run_name(name) -> str:
    """A run name the studio uses as a YAML key, a checkpoint directory and a log file; a ConfigError otherwise."""
    if not isinstance(name, str) or not RUN_NAME.fullmatch(name) or ".." in name:
        raise ConfigError(f"run name {name!r} must be 1-64 letters, digits, '_', '-' or '.', starting with a letter "
                          "or digit (it names the checkpoint directory)")
    return name


@dataclass
class StudioRun:
    name: str
    checkpoint: Path
    process: subprocess.Popen
    log: Path
    threads: int
    started: float
    progress: Progress
    stopping: bool = False

    def state(self) -> dict:
        code = self.process.poll()
        error = None
        if code not in (None, 0) and not (self.stopping and code in STOPPED_BY_SIGTERM):
            error = last_error(self.log) or f"microgpt train exited with status {code}"
        return {"name": self.name, "pid": self.process.pid, "running": code is None, "returncode": code,
                "stopping": self.stopping and code is None, "error": error, "started": self.started,
                "progress": self.progress.read()}


def log_end(log: Path) -> list[str]:
    """The lines in the last LOG_TAIL_BYTES of a run's log, opened without following a link planted in its place
    (the studio writes it: what is there otherwise is not its own); an OSError where it cannot be read."""
    with os.fdopen(os.open(log, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK), "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise OSError(0, "it is not a regular file", str(log))
        f.seek(max(0, os.fstat(f.fileno()).st_size - LOG_TAIL_BYTES))
        return f.read(LOG_TAIL_BYTES).decode("utf-8", errors="replace").splitlines()


def last_error(log: Path) -> str | None:
    """The CLI's one line about what went wrong, from the end of a run's log."""
    try:
        lines = log_end(log)[-50:]
    except OSError:
        return None
    found = [line for line in lines if ERROR_MARK in line]
    return found[-1] if found else (lines[-1] if lines else None)


class RunManager:
    def __init__(self, workspace, cores: int | None = None):
        self.workspace = workspace
        self.cores = cores or os.cpu_count() or 1
        self.runs: dict[str, StudioRun] = {}
        self.elsewhere: dict[str, Progress] = {}  # the progress of runs other processes train, by name

    def checkpoint_of(self, name: str) -> tuple[Path, int]:
        """A named run's checkpoint directory and how many threads it trains with."""
        checkpoint, settings = self.settings_of(name)
        return checkpoint, settings.value("threads") or self.cores

    def settings_of(self, name: str) -> tuple[Path, Settings]:
        """A named run's checkpoint directory and its settings, every path in them held inside the workspace."""
        named = load_run(self.workspace.config, check_run_name(name))
        self.workspace.check_run_paths(named.values, origin=f" of run {name} in {self.workspace.config.name}")
        if isinstance(named.values.get("graph"), str):  # read as training reads it, so a bad one is said now
            read_document(self.workspace.inside(named.values["graph"], what=f"the graph of run {name}"))
        settings = Settings({}, named)
        model = settings.path("model")
        checkpoint = self.workspace.inside(str(model) if model is not None else f"{DEFAULT_ROOT}/{name}",
                                           what=f"the checkpoint of run {name}")  # a link planted there is said
        return checkpoint, settings

    def check_resumed(self, checkpoint: Path) -> None:
        """What a resume reads besides the named run's settings, held inside the workspace: the checkpoint's files,
        and the text it trained on, which its train_state.json names and a resume reads over the run's `file`."""
        self.workspace.whole_inside(checkpoint)
        try:
            state = json.loads(read_small(self.workspace.file_inside(checkpoint / TRAIN_STATE)))
        except (OSError, ValueError, RecursionError):  # a FIFO or a device is not read: it would hold the studio
            return  # the resume says what is wrong with it
        if isinstance(state, dict) and state.get("corpus_file") is not None:
            self.workspace.check_run_paths({"file": state["corpus_file"]},
                                           origin=f" of {self.workspace.relative(checkpoint)}/{TRAIN_STATE}")

    def threads_in_use(self) -> int:
        return sum(run.threads for run in self.runs.values() if run.process.poll() is None)

    def start(self, name: str, resume: bool = False, overwrite: bool = False) -> StudioRun:
        """Start (or with `resume`, continue) the named run of studio.yaml; a ConfigError saying why not, and a
        NameTaken error where a new run would replace a checkpoint without `overwrite` (the page asks first)."""
        checkpoint, settings = self.settings_of(name)
        threads = settings.value("threads") or self.cores
        current = self.runs.get(name)
        if current is not None and current.process.poll() is None:
            raise ConfigError(f"run {name} is training already (process {current.process.pid}); stop it first")
        busy = self.threads_in_use()
        if busy + threads > self.cores:
            raise ConfigError(f"run {name} trains with {threads} thread{'s' * (threads > 1)} and the runs training "
                              f"use {busy} of the {self.cores} cores; stop one, or give it fewer threads")
        WriterLock(checkpoint).acquire().release()  # another writer: its own refusal, naming the process
        if resume:
            self.check_resumed(checkpoint)
        else:
            guard_name(self.workspace, name, overwrite=overwrite)
        command = [sys.executable, "-m", "microgpt", "train", "--config", str(self.workspace.config), "--run", name]
        if resume:
            command += ["--resume", str(checkpoint)]
        elif overwrite:
            command += ["--overwrite"]
        logs = self.workspace.state / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        log_path = logs / f"{name}.log"
        with open_own(log_path, "w") as log:
            process = subprocess.Popen(command, cwd=self.workspace.root, stdin=subprocess.DEVNULL, stdout=log,
                                       stderr=subprocess.STDOUT, start_new_session=True,
                                       env={**os.environ, "PYTHONUNBUFFERED": "1"})
        progress = Progress(checkpoint, settings.value("steps"), settings.value("seq_len") * settings.value("batch_size"))
        run = StudioRun(name, checkpoint, process, log_path, threads, time.time(), progress)
        self.runs[name] = run
        return run

    def stop(self, name: str) -> StudioRun | dict:
        """SIGTERM to a training run: it finishes its step, saves and exits. For a run this studio did not
        start, its state (as `others` gives it) comes back."""
        run = self.runs.get(check_run_name(name))
        if run is None or run.process.poll() is not None:
            elsewhere = next((other for other in self.others() if other["name"] == name), None)
            if elsewhere is None:
                raise ConfigError(f"run {name} is not training")
            os.kill(elsewhere["pid"], signal.SIGTERM)  # it finishes its step, saves and exits
            return {**elsewhere, "stopping": True}
        run.stopping = True
        run.process.send_signal(signal.SIGTERM)
        return run

    def stop_all(self, wait_s: float = 60.0) -> None:
        """SIGTERM to every run still training, then wait for them to save and exit."""
        live = [run for run in self.runs.values() if run.process.poll() is None]
        for run in live:
            run.stopping = True
            run.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + wait_s
        for run in live:
            try:
                run.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                print(f"microgpt studio: run {run.name} (process {run.process.pid}) did not stop within "
                      f"{wait_s:g} s; it is still running", file=sys.stderr)

    def states(self) -> list[dict]:
        return [{**run.state(), "checkpoint": self.workspace.relative(run.checkpoint)} for run in self.runs.values()]

    def others(self) -> list[dict]:
        """The named runs of studio.yaml training now in processes this studio did not start, by their locks."""
        found = []
        for name in self.named_runs():
            current = self.runs.get(name)
            if current is not None and current.process.poll() is None:
                continue
            try:
                checkpoint, _ = self.checkpoint_of(name)
            except ConfigError:
                continue
            pid = WriterLock(checkpoint).holder()
            if pid is not None:
                found.append({"name": name, "pid": pid, "running": True, "returncode": None, "stopping": False,
                              "error": None, "started": None, "elsewhere": True,
                              "checkpoint": self.workspace.relative(checkpoint),
                              "progress": self.progress_elsewhere(name, checkpoint)})
        return found

    def progress_elsewhere(self, name: str, checkpoint: Path) -> dict:
        """The progress of a run another process trains, followed from one call to the next."""
        progress = self.elsewhere.get(name)
        if progress is None or progress.checkpoint != checkpoint:
            _, settings = self.settings_of(name)
            progress = self.elsewhere[name] = Progress(checkpoint, settings.value("steps"),
                                                       settings.value("seq_len") * settings.value("batch_size"))
        return progress.read()

    def log_tail(self, name: str) -> list[str]:
        """The last LOG_TAIL_LINES lines of the output of run `name`, as this studio started it."""
        log = self.workspace.state / "logs" / f"{check_run_name(name)}.log"
        if not log.is_file():
            raise ConfigError(f"run {name} has no log here: this studio did not start it (its output went to "
                              "wherever it was started)")
        return log_end(log)[-LOG_TAIL_LINES:]

    def named_runs(self) -> list[str]:
        if not self.workspace.config.is_file():
            return []
        try:
            return [named.id for named in load_all_runs(self.workspace.config)]
        except ConfigError:
            return []
