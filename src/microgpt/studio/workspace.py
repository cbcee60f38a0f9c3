"""The workspace a studio serves: one directory, every path a request names held inside it, and its lock.

`Workspace.inside` resolves a path a request gives (relative to the workspace; symlinks followed) and refuses
one that lands outside the workspace, through `..` or a link, or that names a hidden studio file; every file
a request reads is resolved and checked so (`file_inside`, `run_log`), and every path-valued setting of a run
(`check_run_paths`: `model`, `file`, a tokenizer.json's `tokenizer`). A directory read whole (a checkpoint, a
prepared dataset and its shards) is refused where a file in it links out (`whole_inside`), as the run list
refuses it. A workspace whose `.studio`, `.studio/logs` or `checkpoints` is a symlink is refused at start,
since the studio writes there. `StudioLock` is an fcntl lock on `.studio/studio.lock`, so a second studio on
the same workspace is refused, naming the process that serves it. `runs` lists every checkpoint of the
workspace as training/run_list.py makes the rows (what `microgpt runs` prints), each named relative to it.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from microgpt.core.checks import Path as PathCheck
from microgpt.core.errors import ConfigError
from microgpt.data.tokenizer import is_tokenizer_file
from microgpt.settings.known import known_settings
from microgpt.studio.metrics import log_of
from microgpt.training.run_files import DEFAULT_ROOT, open_own
from microgpt.training.run_list import checkpoint_files, find_checkpoints, run_rows

STATE_DIR = ".studio"  # the studio's own files: its lock and the runs' logs
CONFIG_FILE = "studio.yaml"  # the named runs the canvas saves (`microgpt train --config studio.yaml --run NAME`)


class WorkspaceError(ConfigError):
    """A path outside the workspace, or a workspace already served; the message says which and why."""


class Workspace:
    def __init__(self, root: str | Path):
        root = Path(root)
        if not root.is_dir():
            raise WorkspaceError(f"the workspace {root} is not a directory; give a directory to serve")
        self.root = root.resolve()
        self.config = self.root / CONFIG_FILE
        self.state = self.root / STATE_DIR
        self.corpus_cache: dict = {}
        for written in (self.state, self.state / "logs", self.root / DEFAULT_ROOT, self.config):
            if written.is_symlink():
                raise WorkspaceError(f"{written} is a symlink; the studio writes there (its lock, its logs, the "
                                     "checkpoints, studio.yaml), so it must be the workspace's own: replace the "
                                     "link")

    def inside(self, text: str, what: str = "the path") -> Path:
        """The path `text` names (relative to the workspace, or absolute), resolved through any links; a
        WorkspaceError when it is outside the workspace or is the studio's own directory."""
        if not isinstance(text, str) or not text or "\0" in text:
            raise WorkspaceError(f"{what} must be a path inside the workspace, not {text!r}")
        resolved = (self.root / text).resolve()
        if resolved != self.root and self.root not in resolved.parents:
            raise WorkspaceError(f"{what} {text!r} is outside the workspace {self.root} (through '..' or a "
                                 "symlink); give a path inside it")
        if resolved == self.state or self.state in resolved.parents:
            raise WorkspaceError(f"{what} {text!r} is the studio's own directory; give another path")
        return resolved

    def file_inside(self, path: Path, what: str = "the file") -> Path:
        """A file the studio is about to read, resolved through any links and held inside the workspace."""
        return self.inside(str(path), what=what)

    def run_of(self, text, what: str = "the run") -> Path:
        """A run's checkpoint directory as a request names it: inside the workspace, and not the workspace."""
        checkpoint = self.inside(text, what=what)
        if checkpoint == self.root:
            raise WorkspaceError(f"{what} {text!r} is the workspace itself; give a run's checkpoint directory")
        return checkpoint

    def run_log(self, text, what: str = "the run") -> Path:
        """The metrics log of the run a request names, resolved and held inside the workspace (a link planted
        in its place that points out is refused)."""
        return self.file_inside(log_of(self.run_of(text, what)), what=f"{what}'s metrics log")

    def check_run_paths(self, values: dict, origin: str = "") -> None:
        """Every path-valued setting of a run (`model`, `file` and any later one) inside the workspace, or a
        WorkspaceError naming it, so that nothing a run reads or writes lands outside."""
        for key, value in values.items():
            field = known_settings().get(key)
            if field is not None and value is not None and (isinstance(field.check, PathCheck) or (
                    key == "tokenizer" and is_tokenizer_file(value))):  # a tokenizer.json's path, not a kind
                # the workspace itself is none of them; a dataset's shards are read too
                self.whole_inside(self.run_of(str(value), what=f"{field.flag}{origin}"))

    def whole_inside(self, path: Path) -> Path:
        """`path` (resolved inside the workspace), where no file of it is a link out: a directory the studio has
        read (a checkpoint, a prepared dataset and its shards) whose links out are refused, naming the first."""
        refused = self.refusal(path)  # None for a file, or a path that is nothing
        if refused is not None:
            raise WorkspaceError(refused)
        return path

    def link_out(self, directory: Path) -> Path | None:
        """A file of `directory` (a checkpoint) that is a link resolving outside the workspace, or None: such a
        checkpoint is not read, sampled or scored."""
        try:
            entries = sorted(os.scandir(directory), key=lambda entry: entry.name)  # the first by name is named
        except OSError:
            return None
        for entry in entries:
            if entry.is_symlink():
                target = Path(entry.path).resolve()
                if target != self.root and self.root not in target.parents:
                    return Path(entry.path)
        return None

    def refusal(self, directory: Path) -> str | None:
        """Why the studio does not read `directory` (the link out that it holds, named), or None."""
        link = self.link_out(directory)
        if link is None:
            return None
        where = link.parent.resolve()
        named = where.relative_to(self.root) / link.name if where == self.root or self.root in where.parents else link
        return (f"{named} links to {link.resolve()}, outside the workspace, so "
                f"{self.relative(directory)} is not read; remove the link")

    def relative(self, path: str | Path) -> str:
        """A path as the workspace names it (relative where it is inside)."""
        resolved = Path(path).resolve()
        return str(resolved.relative_to(self.root)) if self.root in resolved.parents else str(path)

    def checkpoints(self) -> list[Path]:
        """Every checkpoint directory in the workspace (training/run_list.py), and those of a checkpoint's files
        where one links outside it, which are listed as damaged and never read. A folder of other files (graphs/,
        a prepared dataset) is no run, listed or damaged, whatever links it holds: what reads one of its files
        refuses a link out then, naming it."""
        return find_checkpoints(self.root,
                                refused=lambda path: checkpoint_files(path) and self.link_out(path) is not None)

    def runs(self) -> list[dict]:
        """A row per checkpoint (training/run_list.py), each named as the workspace names it."""
        return run_rows(self.checkpoints(), name=self.relative, refusal=self.refusal)


class StudioLock:
    """An exclusive lock on `.studio/studio.lock`, held while the studio serves the workspace."""

    def __init__(self, workspace: Workspace):
        self.path = workspace.state / "studio.lock"
        self._file = None

    def acquire(self, url: str) -> StudioLock:
        self.path.parent.mkdir(exist_ok=True)
        try:
            lock_file = open_own(self.path, "a+")
        except OSError as exc:
            raise WorkspaceError(f"cannot use the lock file {self.path} ({exc.strerror or exc}); remove it") from None
        try:
            fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                lock_file.close()
                raise
            lock_file.seek(0)
            holder = lock_file.read().strip() or "another process"
            lock_file.close()
            raise WorkspaceError(f"{self.path.parent.parent} is already served by a studio (process "
                                 f"{holder.split()[0]}); use that one, or stop it first") from None
        lock_file.seek(0)
        lock_file.truncate()
        lock_file.write(f"{os.getpid()} {url.split('?')[0]}\n")
        lock_file.flush()
        self._file = lock_file
        return self

    def release(self) -> None:
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None
