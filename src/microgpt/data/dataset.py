"""A prepared dataset: a directory of token shards (shards.py) and the manifest that describes them.

    DIR/manifest.json     what `microgpt prepare` made: the tokenizer, the splits and their shards
    DIR/train-00000.bin   the training split's shards, in order
    DIR/val-00000.bin     the held-out split's

The manifest (MANIFEST_VERSION 1):

    {"microgpt_dataset": 1,
     "tokenizer": {...},                          the tokenizer's to_json(), as a checkpoint keeps it
     "dtype": "uint16",                           or "uint32" where the vocabulary needs it
     "splits": {"train": {"documents": D, "tokens": N,
                          "shards": [{"file": "train-00000.bin", "tokens": n, "bytes": b, "sha256": "..."}]},
                "val": {...}},
     "inputs": [{"path": "...", "bytes": b}], "command": "microgpt prepare ...", "created": "...",
     "errors": {"mode": "strict", "replaced": 0, "skipped": 0}}

`open_dataset` checks every shard's size, token type and checksum against the manifest before anything trains,
and in the same read that every token id is one of the tokenizer's (an id past it would index outside the
model's embedding); its `identity` (the manifest's sha256) is what a checkpoint records, so that a resume can
tell a changed dataset.
"""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from microgpt.core.errors import DataError
from microgpt.core.threads import available_cores
from microgpt.core.user_files import TooLarge, parse_json, read_regular
from microgpt.data.shards import DTYPES, HEADER_BYTES, ShardedTokens, open_shard, read_header
from microgpt.data.tokenizer import Tokenizer, from_json

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1
VERSION_KEY = "microgpt_dataset"
MAX_MANIFEST_BYTES = 64 * 1024**2  # a manifest lists shards and inputs: megabytes at most
SPLITS = ("train", "val")
HASH_CHUNK = 16 * 1024**2  # a whole number of tokens of either type
TYPE_NAMES = {dtype.name: dtype for dtype in DTYPES.values()}  # the manifest's "dtype" -> the shards' type


def is_dataset(path: str | Path | None) -> bool:
    """Whether `path` is a directory holding a manifest (a prepared dataset, not a text file), whatever the
    manifest is (opening it says what is wrong with it); a path that cannot be looked at (too long,
    unreadable) is not one, and reading it as a text says why."""
    return path is not None and os.path.lexists(Path(path) / MANIFEST)


@dataclass
class Dataset:
    path: Path
    manifest: dict
    tokenizer: Tokenizer
    train: ShardedTokens
    val: ShardedTokens | None  # None: prepared without a held-out split
    identity: str  # the manifest's sha256

    @property
    def description(self) -> str:
        splits = self.manifest["splits"]
        held = f", {splits['val']['tokens']:,} held out" if self.val is not None else ""
        shards = sum(len(split["shards"]) for split in splits.values())
        return (f"{self.path} (a prepared dataset: {splits['train']['tokens']:,} training tokens{held}, "
                f"{shards} shard{'s' if shards != 1 else ''})")


def open_dataset(path: str | Path, verify: bool = True) -> Dataset:
    """The dataset in `path`, every shard checked against the manifest (its size and token type always, its
    sha256 and its ids against the tokenizer's vocabulary where `verify`); a DataError naming the first that
    disagrees."""
    path = Path(path)
    manifest_path = path / MANIFEST
    try:
        raw = read_regular(manifest_path, MAX_MANIFEST_BYTES)
    except TooLarge:
        raise DataError(f"{manifest_path} is over {MAX_MANIFEST_BYTES:,} bytes; it is not a manifest") from None
    except OSError as exc:
        raise DataError(f"{manifest_path} cannot be read ({exc.strerror or exc}); prepare the dataset again") from None
    try:
        manifest = parse_json(raw)
    except ValueError as exc:
        raise DataError(f"{manifest_path} is {exc}; prepare the dataset again") from None
    _check_manifest(manifest, manifest_path)
    try:
        tokenizer = from_json(manifest["tokenizer"])
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(f"{manifest_path}: its tokenizer cannot be read ({exc}); prepare the dataset again") from None
    splits = {name: _split(path, manifest, name, tokenizer.size, verify) for name in SPLITS
              if name in manifest["splits"]}
    if "train" not in splits or len(splits["train"]) == 0:
        raise DataError(f"{path} has no training tokens; prepare it from a larger input")
    val = splits.get("val")
    return Dataset(path, manifest, tokenizer, splits["train"], val if val is not None and len(val) else None,
                   hashlib.sha256(raw).hexdigest())


def _check_manifest(manifest, where: Path) -> None:
    if not isinstance(manifest, dict) or VERSION_KEY not in manifest:
        raise DataError(f"{where} is not a dataset manifest (no {VERSION_KEY!r}); prepare the dataset with "
                        "microgpt prepare")
    version = manifest[VERSION_KEY]
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise DataError(f"{where}: {VERSION_KEY} must be a format version, got {version!r}")
    if version > MANIFEST_VERSION:
        raise DataError(f"{where} is dataset format {version}, written by a newer microgpt; upgrade microgpt")
    splits = manifest.get("splits")
    if not isinstance(splits, dict) or not all(
            isinstance(s, dict) and isinstance(s.get("shards"), list) for s in splits.values()):
        raise DataError(f"{where} has no readable splits; prepare the dataset again")
    if manifest.get("dtype") not in TYPE_NAMES:
        raise DataError(f"{where}: dtype must be one of {', '.join(TYPE_NAMES)}, got {manifest.get('dtype')!r:.40}; "
                        "prepare the dataset again")


def _split(path: Path, manifest: dict, name: str, vocab_size: int, verify: bool) -> ShardedTokens:
    shards, checked = [], []
    dtype = TYPE_NAMES[manifest["dtype"]]
    for entry in manifest["splits"][name]["shards"]:
        if not isinstance(entry, dict) or not isinstance(entry.get("file"), str) or "/" in entry["file"] \
                or entry["file"].startswith("."):
            raise DataError(f"{path / MANIFEST} lists a shard {entry!r:.60}, not a file of the dataset")
        shard_path = path / entry["file"]
        if not shard_path.is_file():
            raise DataError(f"shard {shard_path} is missing; prepare the dataset again")
        header_dtype, count = read_header(shard_path)
        if header_dtype != dtype:
            raise DataError(f"shard {shard_path} says {header_dtype.itemsize} bytes per token, but the manifest says "
                            f"{dtype.name} ({dtype.itemsize} bytes); prepare the dataset again")
        if count != entry.get("tokens") or shard_path.stat().st_size != entry.get("bytes"):
            raise DataError(f"shard {shard_path} holds {count:,} tokens in {shard_path.stat().st_size:,} bytes, but the "
                            f"manifest says {entry.get('tokens')} tokens in {entry.get('bytes')} bytes; prepare the "
                            "dataset again")
        checked.append((shard_path, entry.get("sha256")))
        shards.append(open_shard(shard_path))
    if verify:  # the shards read side by side (hashlib and numpy let go of the GIL): every core reads one
        with ThreadPoolExecutor(max_workers=available_cores()) as pool:
            scans = list(pool.map(lambda shard: scan_shard(shard, dtype), [shard_path for shard_path, _ in checked]))
        for (shard_path, expected), (digest, largest) in zip(checked, scans):
            if digest != expected:
                raise DataError(f"shard {shard_path} does not match its checksum in the manifest (it changed after "
                                "prepare); prepare the dataset again")
            if largest >= vocab_size:
                raise DataError(f"{shard_path} holds token id {largest}, past the tokenizer's vocabulary of "
                                f"{vocab_size}: the dataset does not match its manifest; prepare it again")
    return ShardedTokens(shards)


def scan_shard(path: Path, dtype: np.dtype) -> tuple[str, int]:
    """(a shard's sha256, its largest token id, -1 when it holds none), from one read of it in chunks."""
    digest, largest = hashlib.sha256(), -1
    with open(path, "rb") as f:
        digest.update(f.read(HEADER_BYTES))
        while chunk := f.read(HASH_CHUNK):
            digest.update(chunk)
            tokens = np.frombuffer(chunk, dtype, len(chunk) // dtype.itemsize)  # (tokens in the chunk,)
            if len(tokens):
                largest = max(largest, int(tokens.max()))
    return digest.hexdigest(), largest


def sha256_of(path: Path) -> str:
    """A file's sha256, read in chunks (the manifest's checksum of a shard)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
