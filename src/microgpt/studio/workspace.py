"""The workspace a studio serves: one directory, every path a request names held inside it, and its lock.

`Workspace.inside` resolves a path a request gives (relative to the workspace; symlinks followed) and refuses
one that lands outside the workspace, through `..` or a link, or that names a hidden studio file; every file
a request reads is resolved and checked so (`file_inside`, `run_log`), and every path-valued setting of a run
(`check_run_paths`). A workspace whose `.studio`, `.studio/logs` or `checkpoints` is a symlink is refused at
start, since the studio writes there. `StudioLock`
is an fcntl lock on `.studio/studio.lock`, so a second studio on the same workspace is refused, naming the
process that serves it. `runs` lists every checkpoint of the workspace with the results.jsonl line of its
latest run (what that line lacks, from the checkpoint's own config and train state), a run's `-best` copy
folded into its row (where its best validation loss was, and at which step).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
from pathlib import Path

from microgpt.core.checks import Path as PathCheck
from microgpt.core.errors import ConfigError
from microgpt.model.checkpoint import TRAIN_STATE, CheckpointError, is_checkpoint, read_config, state_step
from microgpt.model.family import family, n_params
from microgpt.settings.known import known_settings
from microgpt.studio.metrics import log_of
from microgpt.training.run_files import DEFAULT_ROOT, RESULTS_LOG, RunPaths, open_own

STATE_DIR = ".studio"  # the studio's own files: its lock and the runs' logs
CONFIG_FILE = "studio.yaml"  # the named runs the canvas saves (`microgpt train --config studio.yaml --run NAME`)
SCAN_DEPTH = 3  # directories below the workspace searched for checkpoints


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
            if field is not None and isinstance(field.check, PathCheck) and value is not None:
                self.run_of(str(value), what=f"{field.flag}{origin}")  # the workspace itself is none of them

    def links_out(self, directory: Path) -> bool:
        """Whether a file of `directory` (a checkpoint) is a link that resolves outside the workspace: such a
        checkpoint is not read, sampled or scored."""
        try:
            entries = list(os.scandir(directory))
        except OSError:
            return False
        for entry in entries:
            if entry.is_symlink():
                target = Path(entry.path).resolve()
                if target != self.root and self.root not in target.parents:
                    return True
        return False

    def relative(self, path: str | Path) -> str:
        """A path as the workspace names it (relative where it is inside)."""
        resolved = Path(path).resolve()
        return str(resolved.relative_to(self.root)) if self.root in resolved.parents else str(path)

    def checkpoints(self) -> list[Path]:
        """Every checkpoint directory in the workspace, at most SCAN_DEPTH levels down, never through a link."""
        found, level = [], [self.root]
        for _ in range(SCAN_DEPTH):
            below = []
            for directory in level:
                try:
                    entries = sorted(os.scandir(directory), key=lambda e: e.name)
                except OSError:
                    continue
                for entry in entries:
                    if entry.name.startswith(".") or not entry.is_dir(follow_symlinks=False):
                        continue
                    path = Path(entry.path)
                    if self.links_out(path):
                        found.append(path)  # listed, as damaged (`runs`), and never read
                    else:
                        (found if is_checkpoint(path) else below).append(path)
            level = below
        return found

    def results_files(self) -> list[Path]:
        """The results.jsonl files beside the workspace's checkpoints."""
        files = {path.parent / RESULTS_LOG for path in self.checkpoints()}
        return sorted(f for f in files if f.is_file() and not f.is_symlink())

    def runs(self) -> list[dict]:
        """A row per checkpoint: where it is, its step of its steps, and its latest results line's figures."""
        latest: dict[str, dict] = {}
        for results in self.results_files():
            for line in results.read_text(encoding="utf-8", errors="replace").splitlines():
                try:
                    record = json.loads(line)
                    latest[str((results.parent / Path(record["checkpoint"]).name).resolve())] = record
                except (ValueError, KeyError, TypeError, RecursionError):
                    continue
        rows = {}
        for path in self.checkpoints():
            if self.links_out(path):
                rows[path] = {"path": self.relative(path), "name": path.name, "damaged": True, "has_metrics": False,
                              "error": f"{self.relative(path)} links to files outside the workspace; it is not read"}
                continue
            try:
                rows[path] = self.row_of(path, latest.get(str(path.resolve()), {}))
            except (TypeError, ValueError, AttributeError, KeyError, RecursionError, OSError) as exc:
                rows[path] = {"path": self.relative(path), "name": path.name, "damaged": True,
                              "error": f"{self.relative(path)} is damaged and cannot be listed ({exc}); remove it "
                                       "or retrain it", "has_metrics": False}
        self.fold_best_copies(rows)
        return list(rows.values())

    def row_of(self, path: Path, record: dict) -> dict:
        """A checkpoint's row: its step of its steps, and its latest results line's figures."""
        state = _read_json(path / TRAIN_STATE)
        train_config = state.get("train_config")
        steps = train_config.get("steps") if isinstance(train_config, dict) else None
        steps = steps if isinstance(steps, int) and not isinstance(steps, bool) else None
        step = state_step(state)
        row = {
            "path": self.relative(path), "name": path.name, "family": None, "model": record.get("model"),
            "parameters": record.get("parameters"), "step": step, "steps": steps,
            "finished": step is not None and steps is not None and step >= steps,
            "final_loss": record.get("final_loss"), "val_loss": record.get("val_loss"),
            "best_val_loss": record.get("best_val_loss", state.get("best_val_loss")),
            "best_step": None, "best_checkpoint": None, "best_of": None, "seconds": record.get("seconds"),
            "tokens_per_sec": record.get("tokens_per_sec"), "time": record.get("time"),
            "has_metrics": RunPaths(path).metrics.is_file(),
        }
        row.update({key: value for key, value in model_figures(path).items() if row.get(key) is None})
        return row

    def fold_best_copies(self, rows: dict) -> None:
        """A run's `-best` copy folded into the run's row (where and when it was best); an orphan one kept."""
        for path, row in list(rows.items()):
            if row.get("damaged"):
                continue
            run = path.with_name(path.name.removesuffix("-best"))
            if run == path or RunPaths(run).best != path:
                continue
            if run in rows and not rows[run].get("damaged"):  # the run's best copy: one row, the run's
                del rows[path]
                rows[run].update(best_checkpoint=row["path"], best_step=row["step"])
                if rows[run]["best_val_loss"] is None:
                    rows[run]["best_val_loss"] = row["best_val_loss"]
            else:  # all that is left of a run killed before its first save
                row.update(best_of=self.relative(run), best_checkpoint=row["path"], best_step=row["step"])


def model_figures(path: Path) -> dict:
    """A checkpoint's family, parameter count and description, from its config.json (none where it does not read)."""
    try:
        config = read_config(path)
        kind = family(config["family"])
        built = kind.Config(**config["model"])
        return {"family": config["family"], "parameters": n_params(kind, built), "model": kind.describe(built)}
    except (CheckpointError, ConfigError, TypeError, ValueError, RecursionError):
        return {}


def _read_json(path: Path) -> dict:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


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
