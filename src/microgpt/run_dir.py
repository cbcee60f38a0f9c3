"""Where a run writes, checked before the first step: never someone else's files, one writer at a time.

`check_target` refuses a `--model` that is a file, the current directory (or
one above it), a symlink loop, or a non-empty directory that is not a microgpt
checkpoint, since saving replaces the whole directory. `check_writable` makes
sure the checkpoint's parent directory takes new files and has room for a
checkpoint, so a long run does not fail at its end. `WriterLock` holds an
advisory lock (`fcntl.flock`) on `.<name>.lock` beside the checkpoint for the
run's lifetime: a second run on the same directory is refused, naming the
process that holds it. The kernel releases the lock when its process dies, so
a lock left by a killed run never blocks.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import tempfile
from pathlib import Path

from microgpt.checkpoint import FILES, is_checkpoint
from microgpt.config import ConfigError

SIBLING_SUFFIXES = (".tmp", ".prev", "-best", "-best.tmp", "-best.prev")  # what a run writes beside DIR


class RunDirError(ConfigError):
    """The checkpoint directory cannot be used; the message names it, the reason and the fix."""


def _only_our_files(directory: Path) -> bool:
    """Only checkpoint files, and the `.tmpXXXXXX` files safetensors writes before renaming one into place
    (a kill mid-save leaves one)."""
    try:
        return all(entry.name in FILES or entry.name.startswith(".tmp") for entry in directory.iterdir())
    except OSError:
        return False


def check_target(directory: Path) -> None:
    """Refuse, before any training, a checkpoint directory whose save would replace what is not ours."""
    try:
        resolved = directory.resolve(strict=False)
    except (RuntimeError, OSError) as exc:  # Python 3.10-3.12 raise RuntimeError on a loop; later, OSError
        raise RunDirError(f"--model {directory} cannot be resolved ({exc}); is it a symlink loop? "
                          "Pick another --model") from None
    if directory.is_symlink() and not directory.exists():
        raise RunDirError(f"--model {directory} is a symlink to nothing (or a symlink loop); pick another --model")
    if resolved == Path.cwd().resolve() or resolved in Path.cwd().resolve().parents:
        raise RunDirError(f"--model {directory} is the current directory or one above it; saving there would "
                          "replace it; give a new directory, e.g. --model checkpoints/mine")
    for path in (directory, *(directory.with_name(directory.name + s) for s in SIBLING_SUFFIXES)):
        if path.exists() and not path.is_dir():
            raise RunDirError(f"{path} is a file, not a checkpoint directory; saving would replace it; "
                              "pick another --model")
        if path.name.endswith((".tmp", ".prev")) and path.is_dir() and _only_our_files(path):
            continue  # a save cut short: part of one of our checkpoints, which the next save replaces
        if path.is_dir() and any(path.iterdir()) and not is_checkpoint(path):
            raise RunDirError(f"{path} exists and is not a microgpt checkpoint (it holds other files); saving "
                              "would replace them; pick another --model or empty it")


def checkpoint_bytes(n_params: int) -> int:
    """About what one save writes: weights and both Adam moments in float32, with a little room for JSON."""
    return 3 * 4 * n_params + 64 * 1024


def check_writable(directory: Path, n_params: int) -> None:
    """The parent of `directory` exists (or is made), takes a new file, and has room for a checkpoint and
    the temporary copy a save makes beside it."""
    parent = directory.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=parent, prefix=".microgpt-probe-"):
            pass
    except OSError as exc:
        raise RunDirError(f"cannot write in {parent} ({exc.strerror or exc}); the checkpoint, metrics and plots "
                          "go there; pick a writable --model") from None
    needed = 2 * checkpoint_bytes(n_params)
    free = shutil.disk_usage(parent).free
    if free < needed:
        raise RunDirError(f"{parent} has {free:,} bytes free, but saving this model needs about {needed:,}; "
                          "free some space or pick another --model")


class WriterLock:
    """An exclusive advisory lock on `.<name>.lock` beside the checkpoint directory, held while the run lives."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.path = directory.with_name(f".{directory.name}.lock")
        self._file = None

    def acquire(self) -> WriterLock:
        """Take the lock, or RunDirError naming the process that holds it."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            lock_file = open(self.path, "a+", encoding="utf-8")  # noqa: SIM115 - held open while the run lives
        except OSError as exc:
            raise RunDirError(f"cannot write in {self.path.parent} ({exc.strerror or exc}); the checkpoint, metrics "
                              "and plots go there; pick a writable --model") from None
        try:
            fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                lock_file.close()
                raise
            lock_file.seek(0)
            holder = lock_file.read().strip() or "another process"
            lock_file.close()
            raise RunDirError(f"{self.directory} is being written by process {holder}; wait for it to finish, "
                              "or pick another --model") from None
        lock_file.seek(0)
        lock_file.truncate()
        lock_file.write(f"{os.getpid()}\n")
        lock_file.flush()
        self._file = lock_file
        return self

    def release(self) -> None:
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None
