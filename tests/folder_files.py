"""Folders as a test sees them: `listing(folder)`, every file below it and its bytes (to say that a refused
command changed nothing), and `fake_checkpoint(directory)`, a folder that looks like a checkpoint (config.json
and an empty model.safetensors) and is not one."""

from __future__ import annotations

import json
from pathlib import Path


def listing(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def fake_checkpoint(directory: Path, config: dict | None = None) -> Path:
    """`config` (by default {"format_version": 1}) as its config.json."""
    directory.mkdir(parents=True)
    (directory / "config.json").write_text(json.dumps(config or {"format_version": 1}))
    (directory / "model.safetensors").write_bytes(b"")
    return directory
