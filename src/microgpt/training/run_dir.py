"""Where a run writes, checked before the first step: never someone else's files, one writer at a time.

`check_target` refuses a `--model` that is a file, the current directory (or
one above it), a symlink loop, or a non-empty directory that is not a microgpt
checkpoint, since saving replaces the whole directory. `check_replaceable`
refuses a new run over any checkpoint, finished or not (or over its -best),
unless told to overwrite it, naming what would be lost and how to continue
it. `check_writable` makes sure the checkpoint's parent
directory takes new files and has room for a checkpoint, so a long run does
not fail at its end. `WriterLock` holds an advisory lock (`fcntl.flock`) on
`.<name>.lock` beside the checkpoint for the run's lifetime: a second run on
the same directory is refused, naming the process that holds it. The kernel
releases the lock when its process dies, so a lock left by a killed run never
blocks.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path

from microgpt.core.errors import ConfigError, Named, Note
from microgpt.model.checkpoint import TRAIN_STATE, is_checkpoint, state_step
from microgpt.training.run_files import RunPaths, open_own


class RunDirError(ConfigError):
    """The checkpoint directory cannot be used; the message names it, the reason and the fix."""


OVERWRITE = Named("overwrite", True)  # a way out of a refusal: --overwrite on the command line, overwrite=True in Python


def check_target(directory: Path) -> None:
    """Refuse, before any training, a checkpoint directory whose save would replace what is not ours."""
    try:
        resolved = directory.resolve(strict=False)
    except (RuntimeError, OSError) as exc:  # Python 3.10-3.12 raise RuntimeError on a loop; later, OSError
        raise RunDirError(Named("model", str(directory)), f" cannot be resolved ({exc}); is it a symlink loop? "
                          "Pick another ", Named("model")) from None
    if directory.is_symlink():
        what = "a symlink to nothing (or a symlink loop)" if not directory.exists() else f"a symlink to {resolved}"
        raise RunDirError(Named("model", str(directory)), f" is {what}; a save replaces the directory, so give the "
                          "real directory as ", Named("model"), " (or pick another)")
    inside = next((parent for parent in resolved.parents if is_checkpoint(parent)), None)
    if inside is not None:
        raise RunDirError(Named("model", str(directory)), f" is inside the checkpoint {inside}; a run writes files "
                          "beside its checkpoint, which would spoil that one; pick a place outside it")
    if resolved == Path.cwd().resolve() or resolved in Path.cwd().resolve().parents:
        raise RunDirError(Named("model", str(directory)), " is the current directory or one above it; saving there "
                          "would replace it; give a new directory, e.g. ", Named("model", "checkpoints/mine"))
    for path in (directory, RunPaths(directory).best):
        if path.is_symlink() or (path.exists() and not path.is_dir()):
            raise RunDirError(f"{path} is a {'symlink' if path.is_symlink() else 'file'}, not a checkpoint "
                              "directory; saving would replace it; pick another ", Named("model"))
        if path.is_dir() and any(path.iterdir()) and not is_checkpoint(path):
            raise RunDirError(f"{path} exists and is not a microgpt checkpoint (it holds other files); saving "
                              "would replace them; pick another ", Named("model"), " or empty it")
        if path.is_dir() and not os.access(path, os.W_OK | os.X_OK):
            raise RunDirError(f"{path} is not writable, and a save replaces it; make it writable (chmod u+w) or "
                              "pick another ", Named("model"))


def check_replaceable(directory: Path, overwrite: bool) -> Note | None:
    """Before a new run saves over `directory`: None when it holds no checkpoint; with `overwrite`, a note naming
    the checkpoint the run replaces; without it, a RunDirError naming what is there (a finished run, an
    unfinished one, weights only) and the ways out, since a new run there would lose it. Where `directory`
    holds no checkpoint, its -best is read instead: all that is left of a run killed before its first save,
    or another run's, which the new run's best copy would replace."""
    best = RunPaths(directory).best
    place = directory if is_checkpoint(directory) else best if is_checkpoint(best) else None
    if place is None:
        return None
    refusal, note = replacing(place, directory)
    if overwrite:
        return Note("replacing ", *note, "; ", OVERWRITE, ")")
    raise RunDirError(*refusal, key="model")


def replacing(place: Path, directory: Path) -> tuple[tuple, tuple]:
    """(the refusal of a new run at `directory` over the checkpoint at `place`, the note's words for replacing it,
    less their closing ')'), each a message's parts."""
    path = place / TRAIN_STATE
    fresh = ("start again with ", OVERWRITE, ", or pick another ", Named("model"))
    if not path.exists():
        return ((f"{place} holds weights only (no training state); ", *fresh),
                (f"the checkpoint {place} (weights only, no training state to resume",))
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        state = None
    step = state_step(state)
    if step is None:
        return ((f"{path} cannot be read, so whether its run finished is unknown; ", *fresh),
                (f"the checkpoint {place} (its training state cannot be read",))
    config = state.get("train_config")
    steps = config.get("steps") if isinstance(config, dict) else None
    if not isinstance(steps, int) or isinstance(steps, bool):
        return ((f"{place} holds a run at step {step} that records no ", Named("steps"), "; ", *fresh),
                (f"the checkpoint {place} (step {step}; it records no ", Named("steps")))
    resume = Named("resume", str(place))
    if step >= steps:
        return ((f"{place} holds a finished run (step {step}); train it on with ", resume, " ",
                 Named("steps", step + 1000), ", ", *fresh), (f"the finished checkpoint {place} (step {step}",))
    if place == directory:
        return ((f"{place} holds an unfinished run (step {step} of {steps}); continue it with ", resume,
                 ", or start again with ", OVERWRITE), (f"the unfinished checkpoint {place} (step {step} of {steps}",))
    never_saved = f"(step {step} of {steps}) of a run that never saved {directory}"
    return ((f"{place} holds the best checkpoint {never_saved}; continue it with ", resume, " ",
             Named("model", str(directory)), ", or start again with ", OVERWRITE),
            (f"the best checkpoint {place} {never_saved}",))


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
                          "go there; pick a writable ", Named("model")) from None
    needed = 2 * checkpoint_bytes(n_params)
    free = shutil.disk_usage(parent).free
    if free < needed:
        raise RunDirError(f"{parent} has {free:,} bytes free, but saving this model needs about {needed:,}; "
                          "free some space or pick another ", Named("model"))


def check_run_files(directory: Path) -> None:
    """Each plain file the run will write beside the checkpoint (metrics, plot, lock, results.jsonl), where one
    is there already, is a regular file (not a symlink, a directory or a device) that this user may write."""
    for path in RunPaths(directory).written_files():
        check_plain_file(path)


def check_plain_file(path: Path) -> None:
    """A file a run will write, where one is there already, is a regular file (not a symlink, a directory or a
    device) that this user may write; a RunDirError naming it otherwise."""
    if not os.path.lexists(path):
        return
    info = path.lstat()
    if not stat.S_ISREG(info.st_mode):
        what = "a symlink" if stat.S_ISLNK(info.st_mode) else "a directory" if stat.S_ISDIR(info.st_mode) else (
            "not a regular file")
        raise RunDirError(f"{path} is {what}; the run writes its own file there, so remove it or pick another ",
                          Named("model"))
    if not os.access(path, os.W_OK):
        raise RunDirError(f"{path} is not writable by this user (owner uid {info.st_uid}); the run writes to it, "
                          "so pick another ", Named("model"))


class WriterLock:
    """An exclusive advisory lock on `.<name>.lock` beside the checkpoint directory, held while the run lives."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.path = RunPaths(directory).lock
        self._file = None

    def acquire(self) -> WriterLock:
        """Take the lock, or RunDirError naming the process that holds it."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            lock_file = open_own(self.path, "a+")  # held open while the run lives
        except OSError as exc:
            raise RunDirError(f"cannot use the lock file {self.path} ({exc.strerror or exc}); remove it if it is "
                              "not a run's, or pick another ", Named("model")) from None
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
                              "or pick another ", Named("model")) from None
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

    def holder(self) -> int | None:
        """The process that holds this lock now (a run training here), or None: read from the kernel's table of
        locks (/proc/locks), which names the holder of the lock file's inode, never from the pid the file
        records (a finished run's, perhaps reused by another process since). Only read: a probe that took the
        lock, even for a moment, could refuse a run starting at that moment."""
        try:
            inode = os.stat(self.path).st_ino
            table = Path("/proc/locks").read_text(encoding="ascii", errors="replace")
        except OSError:
            return None  # no lock file, or no /proc to ask: nothing is known to hold it
        for line in table.splitlines():
            fields = line.split()  # "1: FLOCK ADVISORY WRITE 4242 08:01:123456 0 EOF"
            if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5].rsplit(":", 1)[-1] == str(inode):
                return int(fields[4]) if fields[4].isascii() and fields[4].isdigit() else None
        return None
