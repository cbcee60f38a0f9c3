"""Prepared datasets written byte for byte as docs/data.md describes, without `microgpt prepare`, so that the
tests of training from a dataset, of the studio offering one and of hostile shards hold the reader to the format
whatever writes it (tests/data/test_prepare.py holds `microgpt prepare` itself)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from microgpt.data.dataset import sha256_of
from microgpt.data.shards import shard_header, token_dtype
from microgpt.data.tokenizer import CharTokenizer


def write_split(directory: Path, name: str, tokens: np.ndarray, shard_tokens: int) -> dict:
    """`tokens` (already of the dataset's dtype) as split `name`'s shards of `shard_tokens`; its manifest entry."""
    shards = []
    for i, start in enumerate(range(0, len(tokens), shard_tokens)):
        part = tokens[start : start + shard_tokens]
        path = directory / f"{name}-{i:05d}.bin"
        path.write_bytes(shard_header(part.dtype, len(part)) + part.tobytes())
        shards.append({"file": path.name, "tokens": len(part), "bytes": path.stat().st_size,
                       "sha256": sha256_of(path)})
    return {"documents": 1, "tokens": len(tokens), "shards": shards}


def write_manifest(directory: Path, tokenizer, dtype: np.dtype, splits: dict) -> Path:
    """The manifest of the splits written by `write_split`; the dataset's directory."""
    manifest = {"microgpt_dataset": 1, "tokenizer": tokenizer.to_json(), "dtype": np.dtype(dtype).name,
                "splits": splits, "inputs": [], "command": "test", "created": "2026-12-01T00:00:00Z",
                "errors": {"mode": "strict", "replaced": 0, "skipped": 0}}
    (directory / "manifest.json").write_text(json.dumps(manifest))
    return directory


def write_dataset(directory: Path, text: str, held_out: int, shard_tokens: int) -> Path:
    """The char tokens of `text` as a dataset: the last `held_out` held out, shards of `shard_tokens`."""
    directory.mkdir()
    tokenizer = CharTokenizer.train(text, None)
    dtype = token_dtype(tokenizer.size)
    ids = tokenizer.encode(text).astype(dtype)
    splits = {name: write_split(directory, name, part, shard_tokens)
              for name, part in (("train", ids[:-held_out]), ("val", ids[-held_out:]))}
    return write_manifest(directory, tokenizer, dtype, splits)
