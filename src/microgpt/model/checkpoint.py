"""Checkpoints: a directory of safetensors weights and a JSON config, written atomically.

Layout (docs/checkpoint.md is the full description):
- `model.safetensors`: every parameter, float32, under its checkpoint name;
- `config.json`: `format_version` (2), the model `family`, the family's config
  under `model`, and the `tokenizer` (its kind and data); a format-1 file (the
  shape at the top level and a `vocab` string) is read as the gpt family with
  the char tokenizer;
- `optimizer.safetensors` and `train_state.json` (once training has stepped):
  the Adam moments (`m.<name>`, `v.<name>`), the step counter, the data
  position and random state, so a run can resume exactly.

Atomic: everything is written into a staging directory `.DIR.tmp-PID-XXXX`
beside it (hidden and this process's own, so it can never be another run's
checkpoint), then the old `DIR` is moved to `.DIR.prev-PID-N`, the staged one
to `DIR`, and the old one is removed. A process killed at any point leaves
either `DIR` or a `.DIR.prev-*` whole; loading `DIR` falls back to the newest
complete `.DIR.prev-*` when `DIR` is missing (and to a `DIR.prev` left by
microgpt before 0.2). A reader that finds a file gone mid-read (a save swapped
the directory under it) reads again, so it always gets one whole checkpoint,
the old or the new. A write that fails (a full disk, a read-only directory)
removes its staging directory, puts the old `DIR` back if it had been moved,
and leaves `DIR` as it was. Leftovers of a save that was killed (staging and
`.prev-*` directories of this checkpoint holding only checkpoint files) are
removed by the next save; nothing else beside `DIR` is ever deleted. Every
file and directory gets the mode the umask gives a new one (0644 and 0755
under umask 022), so whoever may read `config.json` may read the weights.

Only sound weights are saved or loaded: every value finite and none larger in
magnitude than `WEIGHT_LIMIT` (a diverging run's weights blow past it long
before they overflow). Loading checks the weights' header against the family's
parameter specs for config.json's config, and the memory cap, before anything
is allocated.
"""

from __future__ import annotations

import dataclasses
import errno
import glob
import json
import os
import re
import secrets
import shutil
import stat
import tempfile
import time
from pathlib import Path

import numpy as np
from safetensors import SafetensorError, safe_open
from safetensors.numpy import save_file

from microgpt.backends.base import Backend
from microgpt.core.checks import format_bytes
from microgpt.core.errors import ConfigError, DataError, InParts, Named
from microgpt.core.user_files import read_regular
from microgpt.core.version import __version__
from microgpt.data.tokenizer import Tokenizer, from_json
from microgpt.model.family import config_dict, family, path_fields, saved_model
from microgpt.model.memory import DEFAULT_MAX_MEMORY, estimate_training_bytes

FORMAT_VERSION = 2  # 2: family, model and tokenizer in config.json; 1: a GPT's shape and its char vocabulary
V1_KEYS = ("format_version", "microgpt_version", "vocab", "save_id")  # format 1's keys besides the shape
WEIGHTS, CONFIG, OPTIMIZER, TRAIN_STATE = "model.safetensors", "config.json", "optimizer.safetensors", "train_state.json"
FILES = (WEIGHTS, CONFIG, OPTIMIZER, TRAIN_STATE)
# Trained weights of these models stay within a few units (Adam moves a weight by at most about lr per
# step); a run whose weights pass 1e4 has diverged, and its outputs overflow float32 soon after.
WEIGHT_LIMIT = 1e4
MAX_JSON_BYTES = 32 * 1024**2  # config.json or train_state.json: kilobytes, a graph's document at most 4 MiB


class CheckpointError(InParts, ValueError):
    """A checkpoint that cannot be used; the message, given in parts (core/errors.py), says what is wrong and what
    to do."""


class UnsoundWeights(CheckpointError):
    """Weights that are not fit to save or use: non-finite, or past WEIGHT_LIMIT."""


def weight_problem(tensors: dict[str, np.ndarray]) -> str | None:
    """Why these weights are unsound (the first NaN/infinite or oversized tensor), or None when they are fine."""
    for name, tensor in tensors.items():
        if not np.all(np.isfinite(tensor)):
            return f"{name} holds NaN or infinite values"
        largest = float(np.max(np.abs(tensor), initial=0.0))
        if largest > WEIGHT_LIMIT:
            return f"{name} holds a weight of magnitude {largest:.3g}, past the limit {WEIGHT_LIMIT:g} (training diverged)"
    return None


def save_checkpoint(directory: str | Path, model, tokenizer: Tokenizer, train_state: dict | None = None, *,
                    family_name: str) -> Path:
    """Write a model of the family `family_name` with its tokenizer (and, with train_state, the optimizer state)
    to `directory`, atomically.

    Unsound weights raise UnsoundWeights before anything is written; a failed write raises CheckpointError
    naming the path and the cause, with `directory` as it was and no `DIR.tmp` left behind.
    """
    directory = Path(directory)
    weights = model.params.to_host()
    problem = weight_problem(weights)
    if problem:
        raise UnsoundWeights(f"not saving {directory}: {problem}")
    if directory.is_symlink():
        raise CheckpointError(f"not saving {directory}: it is a symlink, and a save replaces the directory; give "
                              f"the directory it points to ({directory.resolve()}) as ", Named("model"))
    tmp = prev = None
    try:
        directory.parent.mkdir(parents=True, exist_ok=True)
        _remove_leftovers(directory)
        tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.tmp-{os.getpid()}-", dir=directory.parent))
        _write_files(tmp, model, weights, family_name, tokenizer, train_state, save_id=secrets.token_hex(8))
        os.chmod(tmp, 0o777 & ~_umask())
        if directory.exists():
            prev = _unused(directory, f".prev-{os.getpid()}")
            os.rename(directory, prev)
        os.rename(tmp, directory)
        tmp = None
        _fsync(directory.parent)
    except OSError as exc:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        if prev is not None and prev.exists() and not directory.exists():
            os.rename(prev, directory)  # the old checkpoint back in its place, so no .prev blocks a later save
            prev = None
        kept = f"the previous checkpoint at {directory} is intact" if directory.exists() else "nothing was saved"
        raise CheckpointError(f"cannot write {exc.filename or directory} ({exc.strerror or exc}); {kept}") from None
    if prev is not None:
        shutil.rmtree(prev, ignore_errors=True)  # one left behind (unremovable) is cleared by a later save
    _remove_leftovers(directory)  # with the checkpoint whole again, what a killed save set aside can go
    return directory


def _unused(directory: Path, tag: str) -> Path:
    """A hidden name beside `directory`, `.NAME<tag>-N`, that nothing has yet."""
    for n in range(1000):
        candidate = directory.with_name(f".{directory.name}{tag}-{n}")
        if not os.path.lexists(candidate):
            return candidate
    raise OSError(errno.EEXIST, "no free staging name", str(directory.parent))


STAGED_TAIL = {"tmp": r"\.tmp-\d+-[a-z0-9_]{8}", "prev": r"\.prev-\d+-\d+"}  # after ".NAME": what a save makes


def staged_twins(directory: Path, kind: str) -> list[Path]:
    """This checkpoint's own staging ("tmp") or set-aside ("prev") directories, newest first: only names a save
    of this checkpoint makes (so `.X.prev-1.prev-99-0`, a set-aside copy of checkpoint `X.prev-1`, is not X's)."""
    pattern = re.compile(r"\." + re.escape(directory.name) + STAGED_TAIL[kind])
    found = [p for p in directory.parent.glob(f".{glob.escape(directory.name)}.{kind}-*")
             if pattern.fullmatch(p.name) and p.is_dir() and not p.is_symlink()]
    return sorted(found, key=lambda p: p.stat().st_mtime_ns, reverse=True)


def _remove_leftovers(directory: Path) -> None:
    """What killed saves of this checkpoint left: its staging directories, and its set-aside ones once
    `directory` is whole again; only ones that hold nothing but checkpoint files."""
    leftovers = staged_twins(directory, "tmp")
    if is_checkpoint(directory):
        leftovers += staged_twins(directory, "prev")
    for path in leftovers:
        if only_checkpoint_files(path):
            shutil.rmtree(path, ignore_errors=True)


def only_checkpoint_files(directory: Path) -> bool:
    """Only checkpoint files, and the `.tmpXXXXXX` files safetensors writes before renaming one into place
    (a kill mid-save leaves one)."""
    try:
        return all(entry.name in FILES or entry.name.startswith(".tmp") for entry in directory.iterdir())
    except OSError:
        return False


def _umask() -> int:
    """This process's umask (read by setting it and putting it back at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _write_files(tmp: Path, model, weights: dict[str, np.ndarray], family_name: str, tokenizer: Tokenizer,
                 train_state: dict | None, save_id: str) -> None:
    """Every file of a checkpoint into `tmp`, each marked with this save's `save_id`, so a reader can tell the
    files of one save from those of the next."""
    params = model.params
    config = {"format_version": FORMAT_VERSION, "microgpt_version": __version__, "family": family_name,
              "model": config_dict(model.config), "tokenizer": tokenizer.to_json(), "save_id": save_id}
    _save_tensors(_float32(weights), tmp / WEIGHTS,
                  metadata={"format": "microgpt", "format_version": str(FORMAT_VERSION), "save_id": save_id})
    _write_json(tmp / CONFIG, config)
    if train_state is not None:
        moments = {f"m.{k}": v for k, v in params.to_host(params.m).items()}
        moments.update({f"v.{k}": v for k, v in params.to_host(params.v).items()})
        _save_tensors(_float32(moments), tmp / OPTIMIZER, metadata={"save_id": save_id})
        _write_json(tmp / TRAIN_STATE, {**train_state, "step": params.step, "save_id": save_id})  # one counter
    mode = 0o666 & ~_umask()
    for path in tmp.iterdir():
        os.chmod(path, mode)  # safetensors writes through a private temporary file (0600)
        _fsync(path)
    _fsync(tmp)


def read_small(path: Path) -> bytes:
    """The bytes of a checkpoint's JSON file (config.json, train_state.json), read only as a regular file (a FIFO
    planted in its place would hold the reader forever) of at most MAX_JSON_BYTES; an OSError otherwise."""
    return read_regular(path, MAX_JSON_BYTES)


def is_checkpoint(directory: Path) -> bool:
    """A directory microgpt wrote: our config.json (with a format_version) and weights, and nothing else (asked
    first, so that no other directory's config.json is read)."""
    try:
        names = {entry.name for entry in directory.iterdir()}
        if WEIGHTS not in names or not names <= set(FILES):
            return False
        config = json.loads(read_small(directory / CONFIG))
    except (OSError, ValueError, RecursionError):
        return False
    return (isinstance(config, dict) and isinstance(config.get("format_version"), int)
            and config["format_version"] <= FORMAT_VERSION)


def remove_checkpoint(directory: Path) -> None:
    """Delete a checkpoint directory, and nothing that is not one (is_checkpoint): a CheckpointError otherwise."""
    if not is_checkpoint(directory):
        raise CheckpointError(f"{directory} is not a microgpt checkpoint, so it was left in place")
    try:
        shutil.rmtree(directory)
    except OSError as exc:
        raise CheckpointError(f"cannot remove {directory} ({exc.strerror or exc})") from None


class CheckpointNotFound(CheckpointError, FileNotFoundError):
    """A file of the checkpoint (`path`), or the checkpoint, is not there (a save may be swapping the directory
    at that moment). A FileNotFoundError too, which is what Python code expects of a path that is not there."""

    def __init__(self, path: Path, message: str | None = None):
        text = message or f"{path} is missing; {path.parent} is not a complete microgpt checkpoint"
        super().__init__(text)
        self.path, self.filename = path, str(path)

    def __str__(self) -> str:
        return self.args[0]


READ_ATTEMPTS, READ_PAUSE_S = 100, 0.02  # a reader meeting a save retries for up to about 2 s


def load_checkpoint(directory: str | Path, backend: Backend, with_optimizer: bool = False,
                    max_memory: int | None = None) -> tuple[object, Tokenizer, dict]:
    """(model, tokenizer, info): info is config.json as format 2 has it (read_config), plus "train_state" when
    with_optimizer and it was saved.

    The config is held against the weights' header, and the model's memory estimate against `max_memory`
    (default: the train command's cap), before the model is built. Its files are read as one checkpoint: each
    carries its save's id, and when a save swapped the directory while they were read (files of different
    saves, or one that vanished while a staging directory of it is there), all are read again; the same mix
    read twice is taken as it is (files edited by hand, not a save under way).
    """
    directory = Path(directory)
    mix = None  # the save ids of the last read that found files of several saves
    for attempt in range(READ_ATTEMPTS):
        seen = _identity(directory)
        try:
            return _load(directory, backend, with_optimizer, max_memory, accept=mix)
        except Mixed as exc:
            mix = exc.ids  # the same mix read twice is no save under way (files edited by hand): taken as it is
            if attempt == READ_ATTEMPTS - 1:
                raise CheckpointError(f"{directory} was saved again during each of {READ_ATTEMPTS} reads, so no "
                                      "one whole checkpoint could be read; try again, or read it between saves "
                                      "(a run saving with --save-every 1 saves every step)") from None
        except CheckpointNotFound as exc:
            # a save under way: the directory swapped, a staging or set-aside twin beside it, or the missing file
            # back already (a swap between two reads, with the new directory on the old one's inode)
            changing = (_identity(directory) != seen or staged_twins(directory, "tmp")
                        or staged_twins(directory, "prev") or os.path.lexists(exc.path))
            if attempt == READ_ATTEMPTS - 1 or not changing:
                check_not_a_folder_of_checkpoints(directory)
                raise
        time.sleep(READ_PAUSE_S)
    raise AssertionError("unreachable")


def check_not_a_folder_of_checkpoints(directory: Path) -> None:
    """A CheckpointError listing the checkpoints inside `directory` (`checkpoints/`), where it holds some."""
    try:
        inside = sorted(path for path in directory.iterdir() if path.is_dir() and is_checkpoint(path))
    except OSError:
        return
    if inside:
        names = ", ".join(path.name for path in inside[:10]) + (f" and {len(inside) - 10} more" if len(inside) > 10
                                                                 else "")
        raise CheckpointError(f"{directory} is a folder of checkpoints, not one: {names}; give one of them, such "
                              f"as {inside[0]}")


def _identity(directory: Path) -> tuple[int, int] | None:
    """Which directory is at this path now (device, inode), or None when there is none: a save swaps it."""
    try:
        info = directory.stat()
    except OSError:
        return None
    return info.st_dev, info.st_ino


def _load(directory: Path, backend: Backend, with_optimizer: bool, max_memory: int | None,
          accept: tuple | None = None) -> tuple[object, Tokenizer, dict]:
    """One read of every file; Mixed when they carry different save ids, unless exactly the mix `accept`."""
    directory = _existing(directory)
    saved_config = read_config(directory)
    shapes, header = _header(directory / WEIGHTS)
    ids = [_save_id(saved_config), header.get("save_id")]  # None in checkpoints from before save ids
    kind, tokenizer, config = _model_config(directory, saved_config)
    cap = DEFAULT_MAX_MEMORY if max_memory is None else max_memory
    # the family's own count first: it is a formula, where listing the parameters of an absurd config (10^12
    # layers) would never end
    _check_cap(directory, kind, config, sum(kind.memory_parts(config, 1, backend).values()), cap)
    specs = kind.param_specs(config)
    _check_tensors(directory / WEIGHTS, shapes, {spec.name: spec.shape for spec in specs})
    _check_cap(directory, kind, config, estimate_training_bytes(kind, config, 1, backend), cap)
    model = kind.build(config, backend, tokenizer, 0)
    tensors, header = _read_tensors(directory / WEIGHTS)
    ids.append(header.get("save_id"))
    _check_tensors(directory / WEIGHTS, tensors, {name: spec.shape for name, spec in model.params.specs.items()})
    problem = weight_problem(tensors)
    if problem:
        raise UnsoundWeights(f"{directory / WEIGHTS}: {problem}; the checkpoint is unusable, retrain it "
                             "(with a lower --lr if it diverged)")
    model.params.from_host(tensors)
    info = dict(saved_config)
    if with_optimizer and (directory / TRAIN_STATE).exists():
        state = _read_json(directory / TRAIN_STATE)
        step = state_step(state)
        if step is None:
            raise CheckpointError(f"{directory / TRAIN_STATE} lacks its 'step'; the training state is damaged, so "
                                  "the run cannot resume (its weights still load)")
        moments, header = _read_tensors(directory / OPTIMIZER)
        ids += [_save_id(state), header.get("save_id")]
        shapes = {f"{p}.{name}": spec.shape for p in ("m", "v") for name, spec in model.params.specs.items()}
        _check_tensors(directory / OPTIMIZER, moments, shapes)
        model.params.from_host({k[2:]: v for k, v in moments.items() if k.startswith("m.")}, model.params.m)
        model.params.from_host({k[2:]: v for k, v in moments.items() if k.startswith("v.")}, model.params.v)
        model.params.step = step  # the training step is Adam's step count
        info["train_state"] = state
    elif (directory / TRAIN_STATE).exists():  # the weights alone, as they were after `step` steps (a model may
        state = _read_json(directory / TRAIN_STATE)  # behave by its step: an ensemble's --prior-off-at)
        if state_step(state) is not None:
            model.params.step = state_step(state)
            ids.append(_save_id(state))
    if len(set(ids)) > 1 and tuple(ids) != accept:
        raise Mixed(tuple(ids))
    return model, tokenizer, info


def _save_id(data: dict):
    """A JSON file's save_id, as text (a hand-edited one of another type compares as its repr)."""
    found = data.get("save_id")
    return found if found is None or isinstance(found, str) else repr(found)


def state_step(state) -> int | None:
    """The step a train_state.json holds (`adam_step` before 0.2), or None when it holds no sound one."""
    step = state.get("step", state.get("adam_step")) if isinstance(state, dict) else None
    return None if isinstance(step, bool) or not isinstance(step, int) or step < 0 else step


def _check_cap(directory: Path, kind, config, needed: int, cap: int) -> None:
    if needed > cap:
        raise CheckpointError(f"{directory / CONFIG} describes a model ({kind.describe(config)}) that needs about "
                              f"{format_bytes(needed)}, over the {format_bytes(cap)} cap; raise ", Named("max_memory"),
                              " if it is really meant")


class Mixed(CheckpointError):
    """Files of one checkpoint directory that carry different save ids (`ids`, in reading order): a save
    swapped the directory during the read, or a file was edited by hand."""

    def __init__(self, ids: tuple):
        super().__init__("the checkpoint's files come from different saves")
        self.ids = ids


def _header(path: Path) -> tuple[dict[str, tuple[int, ...]], dict]:
    """(tensor name -> shape, the metadata) from a safetensors file's header alone (no tensor is read)."""
    _check_regular(path)
    try:
        with safe_open(str(path), "np") as weights:
            shapes = {name: tuple(weights.get_slice(name).get_shape()) for name in weights.keys()}  # noqa: SIM118
            return shapes, weights.metadata() or {}
    except FileNotFoundError:
        raise CheckpointNotFound(path) from None
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"{path} cannot be read as safetensors ({exc}); it is truncated or not a checkpoint") from None


def _model_config(directory: Path, config: dict):
    """(the family module, the tokenizer, the family's config) of config.json, each field checked for its type."""
    where = directory / CONFIG
    try:
        kind = family(config["family"])
    except ConfigError as exc:
        raise CheckpointError(f"{where}: {exc}; it was written by a microgpt that has that family") from None
    try:
        tokenizer = from_json(config["tokenizer"])
    except (ConfigError, DataError) as exc:
        raise CheckpointError(f"{where}: the tokenizer cannot be read ({exc}); the file was edited or damaged") from None
    model = config["model"]
    fields = [f.name for f in dataclasses.fields(kind.Config)]
    missing = [name for name in fields if name not in model]
    if missing:
        raise CheckpointError(f"{where} has no {missing[0]}; it does not describe a {config['family']} model")
    unknown = sorted(set(model) - set(fields))
    if unknown:
        raise CheckpointError(f"{where} has {unknown[0]!r}, which a {config['family']} model does not have; the "
                              "file was edited or written by another microgpt")
    try:
        built = kind.Config(**model)
    except (ConfigError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{where} does not describe a {config['family']} model ({exc})") from None
    changed = sorted(key for key, value in config_dict(built).items() if value != model[key])
    if changed:  # a saved config is whole: a null head_dims would read as the default heads, another model
        raise CheckpointError(f"{where}: {changed[0]} is {model[changed[0]]!r}, which reads as "
                              f"{config_dict(built)[changed[0]]!r}; a saved config holds every value as it was "
                              "trained, so the file was edited or damaged")
    if built.vocab_size != tokenizer.size:
        raise CheckpointError(f"{where}: vocab_size is {built.vocab_size}, but its tokenizer has {tokenizer.size} "
                              "tokens; the file was edited or damaged")
    return kind, tokenizer, built


def read_config(directory: str | Path) -> dict:
    """config.json of a checkpoint directory, checked for its format version and as format 2 has it: a format-1
    file (a GPT's shape at the top level and its characters as `vocab`) reads as family gpt, the shape under
    `model` and the char tokenizer; `format_version` stays the file's. A path where `model` holds a document (the
    graph family's `graph`) is refused unread: the checkpoint holds the graph it trained."""
    directory = _existing(Path(directory))
    config = _read_json(directory / CONFIG)
    version = config.get("format_version") if isinstance(config, dict) else None
    if version is None:
        raise CheckpointError(f"{directory / CONFIG} has no format_version; it was not written by microgpt")
    if isinstance(version, bool) or not isinstance(version, int):
        raise CheckpointError(f"{directory / CONFIG}: format_version must be a whole number, not {version!r}; "
                              "the file was edited or not written by microgpt")
    if not 1 <= version <= FORMAT_VERSION:
        raise CheckpointError(
            f"{directory} is checkpoint format {version}, but this microgpt reads formats 1 to {FORMAT_VERSION}; "
            "use the microgpt version that wrote it"
        )
    if version == 1:
        if not isinstance(config.get("vocab"), str) or not config["vocab"]:
            raise CheckpointError(f"{directory / CONFIG} has no vocabulary (\"vocab\": the characters in id order)")
        shape = {key: value for key, value in config.items() if key not in V1_KEYS}
        kept = {key: config[key] for key in V1_KEYS if key in config and key != "vocab"}
        config = {**kept, "family": "gpt", "model": shape, "tokenizer": {"kind": "char", "vocab": config["vocab"]}}
    for key, kind in (("family", str), ("model", dict), ("tokenizer", dict)):
        if not isinstance(config.get(key), kind):
            raise CheckpointError(f"{directory / CONFIG} has no {key} ({kind.__name__}); the file was edited or "
                                  "not written by microgpt")
    model = saved_model(config["family"], config["model"])  # an older layout read as it was
    for key in path_fields(config["family"]):
        if isinstance(model.get(key), str):  # never followed: a checkpoint reads no file but its own
            raise CheckpointError(f"{directory / CONFIG}: model.{key} is a path, but a checkpoint holds its {key} "
                                  "document itself and reads no other file; the file was edited: put the "
                                  "document in place of the path, or train the model again")
    return {**config, "model": model}


def _existing(directory: Path) -> Path:
    """The checkpoint directory, or, when a save was interrupted mid-swap (`directory` missing), the newest
    whole set-aside twin (or the `DIR.prev` an older microgpt left)."""
    if directory.is_dir():
        return directory
    if not os.path.lexists(directory):
        legacy = directory.with_name(directory.name + ".prev")
        for prev in [*staged_twins(directory, "prev"), *([legacy] if legacy.is_dir() else [])]:
            if is_checkpoint(prev):
                return prev
    if directory.is_file():
        raise CheckpointError(
            f"{directory} is a file, but a microgpt checkpoint is a directory holding {WEIGHTS} and {CONFIG}"
        )
    raise CheckpointNotFound(directory, f"{directory}: no such checkpoint directory; train one with `microgpt train "
                             f"--model {directory}`")


def _check_regular(path: Path) -> None:
    """A checkpoint file must be a readable regular file: CheckpointNotFound when not there, a CheckpointError
    naming the real cause otherwise (a FIFO or a device would hang or never end; a file we may not read)."""
    try:
        info = path.stat()
    except FileNotFoundError:
        raise CheckpointNotFound(path) from None
    except OSError as exc:
        raise CheckpointError(f"{path} cannot be read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(info.st_mode):
        raise CheckpointError(f"{path} is not a regular file (a pipe, a device, or a link to one); {path.parent} "
                              "is not a microgpt checkpoint")
    try:
        open(path, "rb").close()  # a regular file: opening it cannot hang
    except FileNotFoundError:
        raise CheckpointNotFound(path) from None
    except PermissionError:
        raise CheckpointError(f"{path} cannot be read (permission denied, mode {stat.S_IMODE(info.st_mode):o}); "
                              "ask its owner to make it readable") from None
    except OSError as exc:
        raise CheckpointError(f"{path} cannot be read ({exc.strerror or exc})") from None


def _read_json(path: Path) -> dict:
    _check_regular(path)
    try:
        return json.loads(read_small(path))
    except FileNotFoundError:
        raise CheckpointNotFound(path) from None
    except OSError as exc:
        raise CheckpointError(f"{path} cannot be read ({exc.strerror or exc})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path} is not valid JSON ({exc}); the checkpoint is damaged") from None
    except (RecursionError, ValueError):  # nested past Python's depth, or a number past its digit limit
        raise CheckpointError(f"{path} is damaged: its JSON nests too deep or holds a number too long to read; "
                              "the checkpoint cannot be used") from None


def _read_tensors(path: Path) -> tuple[dict[str, np.ndarray], dict]:
    """(every tensor, the metadata) of a safetensors file, read through one open, so both are of one save."""
    _check_regular(path)
    try:
        with safe_open(str(path), "np") as f:
            return {name: f.get_tensor(name) for name in f.keys()}, f.metadata() or {}  # noqa: SIM118
    except FileNotFoundError:
        raise CheckpointNotFound(path) from None
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"{path} cannot be read as safetensors ({exc}); it is truncated or not a checkpoint") from None


def _check_tensors(path: Path, tensors: dict, expected: dict[str, tuple[int, ...]]) -> None:
    """The tensors (arrays, or shapes from a header alone) are exactly the expected names and shapes."""
    missing = sorted(set(expected) - set(tensors))
    if missing:
        raise CheckpointError(f"{path} lacks {len(missing)} tensors the config calls for, e.g. {missing[0]!r}")
    extra = sorted(set(tensors) - set(expected))
    if extra:
        raise CheckpointError(f"{path} has tensors this model does not have, e.g. {extra[0]!r}")
    for name, shape in expected.items():
        found = tuple(getattr(tensors[name], "shape", tensors[name]))
        if found != tuple(shape):
            raise CheckpointError(f"{path}: {name} has shape {found}, the config needs {tuple(shape)}; the checkpoint "
                                  "is damaged or its files come from different models")


def _save_tensors(tensors: dict[str, np.ndarray], path: Path, metadata: dict | None = None) -> None:
    """save_file, with its I/O failures (a full disk) raised as the OSError they are, naming the file."""
    try:
        save_file(tensors, path, metadata=metadata)
    except SafetensorError as exc:
        raise OSError(0, str(exc).rsplit("I/O error: ", 1)[-1], str(path)) from None


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

