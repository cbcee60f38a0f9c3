"""TensorBoard event files for --log tensorboard: every figure of each step's metrics line, written beside it.

`open_board(directory, first_step)` opens a `tensorboardX.SummaryWriter` (the tensorboard extra) on
`DIR.tensorboard/` (run_files.py), beside the checkpoint and never inside one, made here as a real directory
(a symlink or a file in its place is refused, before anything is written: `check_board_dir`). Only the
writing process has a checkpoint, so only it writes events. `BoardLog.write` takes the record that the
trainer writes to DIR.metrics.jsonl and writes each number of it as a scalar at its step, under the tag
`tag_of` gives (loss/train, loss/val, optim/lr, optim/grad_norm; a family's own figures under experts/,
heads/ or model/), with the run's tokens per second as speed/tokens_per_sec. metrics.jsonl stays what
`microgpt plot` and the studio read.

A resumed run writes a new event file in the same directory that starts with TensorBoard's purge marker at its
first step (`purge_step`): steps a killed run logged after its last save are hidden, as the trainer cuts them
from metrics.jsonl. TensorBoard keeps scalars as float32.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import time
from pathlib import Path

from microgpt.core.errors import ConfigError, Named
from microgpt.model.checkpoint import CheckpointError

FLUSH_SECONDS = 5  # how often the writer's thread puts pending events on disk, for a board watching the run
TRAINER_TAGS = {"loss": "loss/train", "val_loss": "loss/val", "lr": "optim/lr", "grad_norm": "optim/grad_norm",
                "tokens_per_sec": "speed/tokens_per_sec"}
NOT_FIGURES = ("step", "time")  # the record's step is the scalar's step; its time, the event's wall time
FAMILY_GROUP = re.compile(r"(expert|head)\d+_")  # a per-expert or per-head figure: expert2_loss, head1_loss


def tag_of(key: str) -> str:
    """The TensorBoard tag of a metrics.jsonl key."""
    if key in TRAINER_TAGS:
        return TRAINER_TAGS[key]
    group = FAMILY_GROUP.match(key)
    return f"{group.group(1)}s/{key}" if group else f"model/{key}"


def check_board_dir(directory: Path) -> None:
    """The events directory is absent or a real directory this user may write in; a ConfigError naming it."""
    if not os.path.lexists(directory):
        return
    info = directory.lstat()
    if not stat.S_ISDIR(info.st_mode):
        what = "a symlink" if stat.S_ISLNK(info.st_mode) else "not a directory"
        raise ConfigError(f"{directory} is {what}; ", Named("log", "tensorboard"), " writes its event files in a "
                          "directory of that name, so remove it or pick another ", Named("model"), key="model")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ConfigError(f"{directory} is not writable by this user; ", Named("log", "tensorboard"), " writes its "
                          "event files there, so pick another ", Named("model"), key="model")


class BoardLog:
    """A SummaryWriter on the run's events directory, written a metrics record at a time."""

    def __init__(self, directory: Path, first_step: int):
        from tensorboardX import SummaryWriter  # the tensorboard extra, needed only here

        check_board_dir(directory)
        try:
            directory.mkdir(exist_ok=True)
        except OSError as exc:
            raise CheckpointError(f"cannot make {directory} ({exc.strerror or exc})") from None
        earlier = any(p.name.startswith("events.out.tfevents.") for p in directory.iterdir())
        self.directory = directory
        # the writer names its file by the second and the host; TensorBoard reads files in name order, so a
        # suffix of nanoseconds keeps a resume's file its own and after an earlier one of the same second
        self.writer = SummaryWriter(str(directory), purge_step=first_step + 1 if earlier else None,
                                    flush_secs=FLUSH_SECONDS, filename_suffix=f".{time.time_ns()}.{os.getpid()}")

    def write(self, record: dict, tokens_per_sec: float) -> None:
        """Each number of a metrics record as a scalar at its step, and the speed so far."""
        step = record["step"]
        figures = {**record, "tokens_per_sec": tokens_per_sec}
        try:
            for key, value in figures.items():
                if key not in NOT_FIGURES and isinstance(value, (int, float)) and not isinstance(value, bool):
                    self.writer.add_scalar(tag_of(key), value, global_step=step)
        except OSError as exc:
            raise CheckpointError(f"cannot write the event files in {self.directory} ({exc.strerror or exc})") from None

    def close(self) -> None:
        self.writer.close()


@contextlib.contextmanager
def open_board(directory: Path | None, first_step: int):
    """A BoardLog on `directory` while the run trains (closed, so flushed, at its end), or None without one."""
    if directory is None:
        yield None
        return
    board = BoardLog(directory, first_step)
    try:
        yield board
    finally:
        board.close()
