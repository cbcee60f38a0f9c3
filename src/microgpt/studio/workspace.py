"""The workspace a studio serves: one directory, every path a request names held inside it, and its lock.

`Workspace.inside` resolves a path a request gives (relative to the workspace; symlinks followed) and refuses
one that lands outside the workspace, through `..` or a link, or that names a hidden studio file. `StudioLock`
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

from microgpt.core.errors import ConfigError
from microgpt.model.checkpoint import TRAIN_STATE, CheckpointError, is_checkpoint, read_config, state_step
from microgpt.model.family import family, n_params
from microgpt.training.run_files import RESULTS_LOG, RunPaths, open_own

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
                except (ValueError, KeyError, TypeError):
                    continue
        rows = {}
        for path in self.checkpoints():
            record = latest.get(str(path.resolve()), {})
            state = _read_json(path / TRAIN_STATE)
            steps = (state.get("train_config") or {}).get("steps")
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
            rows[path] = row
        for path, row in list(rows.items()):
            run = path.with_name(path.name.removesuffix("-best"))
            if run == path or RunPaths(run).best != path:
                continue
            if run in rows:  # the run's best copy: one row, the run's, says where and when it was best
                del rows[path]
                rows[run].update(best_checkpoint=row["path"], best_step=row["step"])
                if rows[run]["best_val_loss"] is None:
                    rows[run]["best_val_loss"] = row["best_val_loss"]
            else:  # all that is left of a run killed before its first save
                row.update(best_of=self.relative(run), best_checkpoint=row["path"], best_step=row["step"])
        return list(rows.values())


def model_figures(path: Path) -> dict:
    """A checkpoint's family, parameter count and description, from its config.json (none where it does not read)."""
    try:
        config = read_config(path)
        kind = family(config["family"])
        built = kind.Config(**config["model"])
        return {"family": config["family"], "parameters": n_params(kind, built), "model": kind.describe(built)}
    except (CheckpointError, ConfigError, TypeError, ValueError):
        return {}


def _read_json(path: Path) -> dict:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
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
