"""A run that stopped short says so beside its checkpoint: `<checkpoint>.failed.json` holds the step it
failed at, the step of the checkpoint it kept and the one line it ended with, so that `microgpt runs` and
the studio's list show it as failed (training/run_list.py) rather than merely unfinished. The next save of
the run (a resume that gets further) removes it; the checkpoint itself is never touched.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def record_failure(path: Path | None, failed_at: int, kept_step: int | None, message: str) -> None:
    """Write the record (atomically: a temporary file renamed over it); nothing without a checkpoint path."""
    if path is None:
        return
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps({"failed_at": failed_at, "checkpoint_step": kept_step, "error": message}),
                         encoding="utf-8")
    os.replace(temporary, path)


def clear_failure(path: Path | None) -> None:
    if path is not None and path.is_file() and not path.is_symlink():
        path.unlink()


def failure_of(path: Path, step: int | None) -> str | None:
    """The line a run failed with, where its record speaks of the checkpoint that is there (at `step`)."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(record, dict) or record.get("checkpoint_step") != step:
        return None
    return str(record.get("error", "stopped short"))
