"""Checkpoints: a directory of safetensors weights and a JSON config, written atomically.

Layout (docs/checkpoint.md is the full description):
- `model.safetensors`: every parameter, float32, under its checkpoint name;
- `config.json`: `format_version`, the model shape and the vocabulary;
- `optimizer.safetensors` and `train_state.json` (once training has stepped):
  the Adam moments (`m.<name>`, `v.<name>`), the step counter, the data
  position and random state, so a run can resume exactly.

Atomic: everything is written into `DIR.tmp`, then the old `DIR` is moved to
`DIR.prev`, `DIR.tmp` to `DIR`, and `DIR.prev` is removed. A process killed at
any point leaves either `DIR` or `DIR.prev` whole; loading `DIR` falls back to
`DIR.prev` when `DIR` is missing.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load_file, save_file

from microgpt import __version__
from microgpt.backends.base import Backend
from microgpt.config import ConfigError, ModelConfig
from microgpt.model import GPT

FORMAT_VERSION = 1
WEIGHTS, CONFIG, OPTIMIZER, TRAIN_STATE = "model.safetensors", "config.json", "optimizer.safetensors", "train_state.json"


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; the message says what is wrong and what to do."""


def save_checkpoint(directory: str | Path, model: GPT, vocab: str, train_state: dict | None = None) -> Path:
    """Write model (and, with train_state, the optimizer state) to `directory`, atomically."""
    directory = Path(directory)
    tmp, prev = _sibling(directory, ".tmp"), _sibling(directory, ".prev")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    params = model.params
    config = {"format_version": FORMAT_VERSION, "microgpt_version": __version__, **model.config.to_dict(), "vocab": vocab}
    save_file(_float32(params.to_host()), tmp / WEIGHTS, metadata={"format": "microgpt", "format_version": "1"})
    _write_json(tmp / CONFIG, config)
    if train_state is not None:
        moments = {f"m.{k}": v for k, v in params.to_host(params.m).items()}
        moments.update({f"v.{k}": v for k, v in params.to_host(params.v).items()})
        save_file(_float32(moments), tmp / OPTIMIZER)
        _write_json(tmp / TRAIN_STATE, {**train_state, "adam_step": params.step})
    for path in tmp.iterdir():
        _fsync(path)
    _fsync(tmp)
    if directory.exists():
        if prev.exists():
            shutil.rmtree(prev)
        os.rename(directory, prev)
    os.rename(tmp, directory)
    _fsync(directory.parent)
    if prev.exists():
        shutil.rmtree(prev)
    return directory


def load_checkpoint(directory: str | Path, backend: Backend, with_optimizer: bool = False) -> tuple[GPT, str, dict]:
    """(model, vocab, info): info is config.json, plus "train_state" when with_optimizer and it was saved."""
    directory = _existing(Path(directory))
    config_dict = read_config(directory)
    try:
        config = ModelConfig(
            vocab_size=len(config_dict["vocab"]),
            d_model=config_dict["d_model"],
            n_layers=config_dict["n_layers"],
            head_dims=tuple(config_dict["head_dims"]),
            d_ff=config_dict["d_ff"],
            seq_len=config_dict["seq_len"],
        )
    except (KeyError, TypeError, ConfigError) as exc:
        raise CheckpointError(f"{directory / CONFIG} does not describe a microgpt model ({exc})") from None
    model = GPT(config, backend)
    tensors = _read_tensors(directory / WEIGHTS)
    _check_tensors(directory / WEIGHTS, tensors, {name: spec.shape for name, spec in model.params.specs.items()})
    model.params.from_host(tensors)
    info = dict(config_dict)
    if with_optimizer and (directory / TRAIN_STATE).exists():
        state = _read_json(directory / TRAIN_STATE)
        moments = _read_tensors(directory / OPTIMIZER)
        shapes = {f"{p}.{name}": spec.shape for p in ("m", "v") for name, spec in model.params.specs.items()}
        _check_tensors(directory / OPTIMIZER, moments, shapes)
        model.params.from_host({k[2:]: v for k, v in moments.items() if k.startswith("m.")}, model.params.m)
        model.params.from_host({k[2:]: v for k, v in moments.items() if k.startswith("v.")}, model.params.v)
        model.params.step = int(state["adam_step"])
        info["train_state"] = state
    return model, config_dict["vocab"], info


def read_config(directory: str | Path) -> dict:
    """config.json of a checkpoint directory, checked for its format version."""
    directory = _existing(Path(directory))
    config = _read_json(directory / CONFIG)
    version = config.get("format_version") if isinstance(config, dict) else None
    if version is None:
        raise CheckpointError(f"{directory / CONFIG} has no format_version; it was not written by microgpt")
    if version != FORMAT_VERSION:
        raise CheckpointError(
            f"{directory} is checkpoint format {version}, but this microgpt reads format {FORMAT_VERSION}; "
            "use the microgpt version that wrote it"
        )
    if not isinstance(config.get("vocab"), str) or not config["vocab"]:
        raise CheckpointError(f"{directory / CONFIG} has no vocabulary (\"vocab\": the characters in id order)")
    return config


def _existing(directory: Path) -> Path:
    """The checkpoint directory, or its .prev twin when a save was interrupted mid-swap."""
    if directory.is_dir():
        return directory
    prev = _sibling(directory, ".prev")
    if not directory.exists() and prev.is_dir():
        return prev
    if directory.is_file():
        raise CheckpointError(
            f"{directory} is a file, but a microgpt checkpoint is a directory holding {WEIGHTS} and {CONFIG}"
        )
    raise CheckpointError(f"{directory}: no such checkpoint directory; train one with `microgpt train --model {directory}`")


def _read_json(path: Path) -> dict:
    if not path.is_file():
        raise CheckpointError(f"{path} is missing; {path.parent} is not a complete microgpt checkpoint")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path} is not valid JSON ({exc}); the checkpoint is damaged") from None


def _read_tensors(path: Path) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise CheckpointError(f"{path} is missing; {path.parent} is not a complete microgpt checkpoint")
    try:
        return load_file(path)
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"{path} cannot be read as safetensors ({exc}); it is truncated or not a checkpoint") from None


def _check_tensors(path: Path, tensors: dict[str, np.ndarray], expected: dict[str, tuple[int, ...]]) -> None:
    missing = sorted(set(expected) - set(tensors))
    if missing:
        raise CheckpointError(f"{path} lacks {len(missing)} tensors the config calls for, e.g. {missing[0]!r}")
    extra = sorted(set(tensors) - set(expected))
    if extra:
        raise CheckpointError(f"{path} has tensors this model does not have, e.g. {extra[0]!r}")
    for name, shape in expected.items():
        if tuple(tensors[name].shape) != tuple(shape):
            raise CheckpointError(f"{path}: {name} has shape {tuple(tensors[name].shape)}, the config needs {tuple(shape)}")
        if not np.all(np.isfinite(tensors[name])):
            raise CheckpointError(f"{path}: {name} holds NaN or infinite values; the checkpoint is unusable")


def _float32(tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {name: np.ascontiguousarray(t, dtype=np.float32) for name, t in tensors.items()}


def _write_json(path: Path, data: dict) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, ensure_ascii=False)
        f.write("\n")


def _fsync(path: Path) -> None:
    """Flush a file or a directory entry list to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sibling(directory: Path, suffix: str) -> Path:
    return directory.with_name(directory.name + suffix)
