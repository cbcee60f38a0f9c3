"""The files a run writes beside its checkpoint, named in one place, and how each is opened.

For a checkpoint directory DIR: `DIR-best` (the best validation checkpoint),
`DIR.metrics.jsonl` (a line per step), `DIR.loss.png` (its plot), `DIR.tensorboard/`
(with --log tensorboard, TensorBoard's event files: beside, never inside, a directory that a save replaces),
`.DIR.lock` (the writer lock) and `results.jsonl` beside them (a line per run
trained there). `open_own` opens one of them for writing without following a
symlink, and only as a regular file: a link planted in its place
(`DIR.metrics.jsonl -> ~/.bashrc`) is refused rather than written through.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

DEFAULT_ROOT = Path("checkpoints")  # where a run saves without --model: checkpoints/<run id or file name>
RESULTS_LOG = "results.jsonl"
COMPARE_PLOT = "compare.png"  # in a --compare directory: every spec's curve
MAX_LOG_LINE = 64 * 1024  # a line of a metrics log or results.jsonl is a few hundred bytes; a longer one is damage


@dataclass(frozen=True)
class RunPaths:
    """Where a run writes: the checkpoint directory (None with --no-save) and the files beside it."""

    checkpoint: Path | None
    board: bool = False  # --log tensorboard: event files too

    def _beside(self, suffix: str) -> Path | None:
        return None if self.checkpoint is None else self.checkpoint.with_name(self.checkpoint.name + suffix)

    @property
    def best(self) -> Path | None:
        return self._beside("-best")

    @property
    def metrics(self) -> Path | None:
        return self._beside(".metrics.jsonl")

    @property
    def tensorboard(self) -> Path | None:
        """The directory of TensorBoard event files, with --log tensorboard."""
        return self._beside(".tensorboard") if self.board else None

    @property
    def loss_plot(self) -> Path | None:
        return self._beside(".loss.png")

    @property
    def failure(self) -> Path | None:
        """Why the run last stopped short (training/failure.py), while its checkpoint is the one it kept."""
        return self._beside(".failed.json")

    @property
    def lock(self) -> Path | None:
        return None if self.checkpoint is None else self.checkpoint.with_name(f".{self.checkpoint.name}.lock")

    @property
    def results(self) -> Path | None:
        return None if self.checkpoint is None else self.checkpoint.parent / RESULTS_LOG

    def written_files(self) -> list[Path]:
        """The plain files the run writes (not the checkpoint directories)."""
        return [] if self.checkpoint is None else [self.metrics, self.loss_plot, self.failure, self.lock,
                                                   self.results]


def metrics_log(run: Path) -> Path:
    """A run's metrics log, from its checkpoint directory or the log itself."""
    return run if run.name.endswith(".metrics.jsonl") else RunPaths(run).metrics


def open_own(path: Path, mode: str, binary: bool = False):
    """`path` opened for writing ("w", "a" or "a+"; text, or bytes with `binary`), made if missing, never
    through a symlink and only as a regular file; an OSError naming the file otherwise."""
    flags = {"w": os.O_WRONLY | os.O_TRUNC, "a": os.O_WRONLY | os.O_APPEND, "a+": os.O_RDWR | os.O_APPEND}[mode]
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | getattr(os, "O_NONBLOCK", 0), 0o666)
    except OSError as exc:
        if os.path.islink(path):
            raise OSError(exc.errno, "it is a symlink, which microgpt does not write through", str(path)) from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(0, "it is not a regular file", str(path))
    os.set_blocking(fd, True)
    return os.fdopen(fd, mode + "b") if binary else os.fdopen(fd, mode, encoding="utf-8")
