"""Writing a split's tokens into shards of at most --shard-tokens each (the format: data/shards.py).

A shard is written as a header with a count of 0, then its tokens as they come; when it is full (or the
split ends) the header is rewritten with the count, the file is flushed to disk, and its sha256 is taken.
An empty split has no shards. Each shard is `<split>-<5 digits>.bin`, numbered from 0.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from microgpt.data.dataset import sha256_of
from microgpt.data.shards import shard_header


class ShardWriter:
    def __init__(self, directory: Path, split: str, dtype: np.dtype, shard_tokens: int):
        self.directory, self.split, self.dtype, self.shard_tokens = directory, split, np.dtype(dtype), shard_tokens
        self.shards: list[dict] = []  # the manifest's entries of the shards finished
        self.tokens = 0  # all written, in every shard
        self.bytes = 0
        self._file = None
        self._count = 0  # tokens in the open shard

    def append(self, tokens: np.ndarray) -> None:
        """Write these tokens (n,) after those already written, starting shards as each fills."""
        tokens = np.ascontiguousarray(tokens, dtype=self.dtype)
        while len(tokens):
            if self._file is None:
                self._open()
            take = min(len(tokens), self.shard_tokens - self._count)
            self._write(tokens[:take].tobytes())
            self._count += take
            self.tokens += take
            tokens = tokens[take:]
            if self._count == self.shard_tokens:
                self._finish()

    def close(self) -> list[dict]:
        """Finish the open shard; the entries of every shard, for the manifest."""
        if self._file is not None:
            self._finish()
        return self.shards

    def abandon(self) -> None:
        """Close the open shard's file without finishing it (the directory is about to be removed)."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def _path(self) -> Path:
        return self.directory / f"{self.split}-{len(self.shards):05d}.bin"

    def _open(self) -> None:
        self._file = open(self._path(), "wb")  # noqa: SIM115 - kept open across appends, closed by _finish
        self._count = 0
        self._write(shard_header(self.dtype, 0))

    def _write(self, data: bytes) -> None:
        self._file.write(data)

    def _finish(self) -> None:
        path = self._path()
        self._file.seek(0)
        self._write(shard_header(self.dtype, self._count))
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        self._file = None
        size = path.stat().st_size
        self.bytes += size
        self.shards.append({"file": path.name, "tokens": self._count, "bytes": size, "sha256": sha256_of(path)})
