"""Where an export may write, checked before anything is read, and the write itself: beside the target first,
then renamed into place, so a reader never sees half a model and a failed export leaves nothing behind.

Refused: a directory; a path whose folder is missing or not writable; a path inside a checkpoint (which holds
only what microgpt writes there); another run's file beside its checkpoint (`DIR.metrics.jsonl`,
`DIR.loss.png`, `.DIR.lock`, `results.jsonl`: training/run_files.py names them); an existing file or link,
unless told to overwrite it. `graph from-family --out` is held to the same rule (`check_out`), and `prepare
--out` to the checkpoint's (`checkpoint_around`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from microgpt.core.errors import Named
from microgpt.export.export_plan import ExportError
from microgpt.model.checkpoint import is_checkpoint

RUN_FILE_SUFFIXES = (".metrics.jsonl", ".loss.png")  # a run's files beside its checkpoint DIR
RUN_FILE_NAMES = ("results.jsonl",)


def run_file(path: Path) -> bool:
    """Whether `path` names a file a training run writes beside its checkpoint."""
    name = path.name
    if name in RUN_FILE_NAMES or any(name.endswith(suffix) for suffix in RUN_FILE_SUFFIXES):
        return True
    return name.startswith(".") and name.endswith(".lock") and (path.parent / name[1:-5]).is_dir()


def checkpoint_around(path: Path) -> Path | None:
    """The checkpoint that `path` lies inside, at any depth; None where there is none."""
    return next((folder for folder in path.resolve().parents if is_checkpoint(folder)), None)


def check_out(path: Path, overwrite: bool = False) -> None:
    """ExportError, before anything is made, for an --out the export must not write (the module docstring)."""
    out = Named("out", str(path))
    if path.is_dir():
        raise ExportError(out, " is a directory; give the path of a file to write")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise ExportError(out, f": cannot write in {parent} (missing or not writable); give a writable path")
    checkpoint = checkpoint_around(path)
    if checkpoint is not None:
        raise ExportError(out, f" is inside the checkpoint {checkpoint}, which holds only what microgpt writes there; "
                          "write it elsewhere")
    if run_file(path) or run_file(path.resolve()):
        raise ExportError(out, " is a file a training run writes beside its checkpoint; give another name")
    if (path.exists() or path.is_symlink()) and not overwrite:
        raise ExportError(out, " exists; add ", Named("overwrite", True), " to replace it, or give another name")


def write_atomically(path: Path, write: Callable) -> None:
    """`write(binary file)` into a new file beside `path`, renamed onto it once whole; nothing left on failure."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        raise ExportError(f"cannot write {path} ({exc.strerror or exc}); nothing was written") from None
    finally:
        tmp.unlink(missing_ok=True)
