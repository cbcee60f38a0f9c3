"""Token shards: the files a prepared dataset keeps its tokens in, and the view that trains from them.

A shard is a 64-byte header and then its tokens, little-endian, one after another:

    bytes 0-7    magic  b"MGPTTOK1"
    bytes 8-11   format version (uint32, 1)
    bytes 12-15  bytes per token (uint32: 2 for uint16, 4 for uint32)
    bytes 16-23  token count (uint64)
    bytes 24-63  zero

so `np.memmap(path, dtype, mode="r", offset=64, shape=(count,))` reads it without copying (docs/data.md has
the ten lines). Training reads it by position instead (`ShardReader`: one pread per slice), so that the
pages it reads are the kernel's page cache and never the process's resident memory, as a memory map's
would be. `ShardedTokens` is the shards of one split as one sequence: its length, and slices that may cross
a shard boundary (what `batches.py` and validation take of a token array), so that memory does not grow
with the dataset.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np

from microgpt.core.errors import DataError

MAGIC = b"MGPTTOK1"
SHARD_VERSION = 1
HEADER_BYTES = 64
_HEADER = struct.Struct("<8sIIQ")  # magic, version, bytes per token, count; zero to HEADER_BYTES
DTYPES = {2: np.dtype("<u2"), 4: np.dtype("<u4")}


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 where every id fits, else uint32."""
    return DTYPES[2] if vocab_size <= 2**16 else DTYPES[4]


def shard_header(dtype: np.dtype, count: int) -> bytes:
    return _HEADER.pack(MAGIC, SHARD_VERSION, np.dtype(dtype).itemsize, count).ljust(HEADER_BYTES, b"\0")


def read_header(path: Path) -> tuple[np.dtype, int]:
    """(dtype, count) of a shard, after checking its magic, version and size; DataError naming it otherwise."""
    try:
        with open(path, "rb") as f:
            head = f.read(HEADER_BYTES)
        size = path.stat().st_size
    except OSError as exc:
        raise DataError(f"shard {path} cannot be read ({exc.strerror or exc}); prepare the dataset again") from None
    if len(head) < HEADER_BYTES or head[:8] != MAGIC:
        raise DataError(f"{path} is not a token shard (no {MAGIC.decode()} header); prepare the dataset again")
    _, version, itemsize, count = _HEADER.unpack(head[: _HEADER.size])
    if version > SHARD_VERSION:
        raise DataError(f"shard {path} is format {version}, written by a newer microgpt; upgrade microgpt")
    if itemsize not in DTYPES:
        raise DataError(f"shard {path} says {itemsize} bytes per token; a shard holds 2 or 4")
    if size != HEADER_BYTES + count * itemsize:
        raise DataError(f"shard {path} is {size:,} bytes, but its header says {count:,} tokens of {itemsize} bytes "
                        f"({HEADER_BYTES + count * itemsize:,} bytes): it is cut short or damaged; prepare the "
                        "dataset again")
    return DTYPES[itemsize], count


def open_shard(path: Path) -> ShardReader:
    """A shard's tokens (count,), read by position."""
    dtype, count = read_header(path)
    return ShardReader(path, dtype, count)


class ShardReader:
    """One shard's tokens: len() and slices [a:b] (step 1), each one pread of the file, as int64 arrays. The
    file is opened for each read and closed after, so that a dataset of any number of shards holds no
    descriptors (1,594 shards held 1,594 and passed `ulimit -n 1024`); a read that finds another file at the
    path than the one opened first (a dataset replaced while training) is refused."""

    def __init__(self, path: Path, dtype: np.dtype, count: int):
        self.path, self.dtype, self.count = path, dtype, count
        self._identity = _identity(os.stat(path))

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index):
        if not isinstance(index, slice) or index.step not in (None, 1):
            raise TypeError("a shard is read by slices [a:b]")
        start, stop, _ = index.indices(self.count)
        n = max(0, stop - start)
        size = self.dtype.itemsize
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError as exc:
            raise DataError(f"shard {self.path} cannot be read ({exc.strerror or exc}); prepare the dataset again") \
                from None
        try:
            same = _identity(os.fstat(fd)) == self._identity
            data = os.pread(fd, n * size, HEADER_BYTES + start * size)
        finally:
            os.close(fd)
        if not same or len(data) != n * size:
            raise DataError(f"shard {self.path} changed while training; prepare the dataset again")
        return np.frombuffer(data, dtype=self.dtype).astype(np.int64)  # (n,)


def _identity(stat: os.stat_result) -> tuple[int, int, int]:
    """Which file a stat is of, and whether it was written since: device, inode, modification time."""
    return stat.st_dev, stat.st_ino, stat.st_mtime_ns


class ShardedTokens:
    """The tokens of several shards as one sequence: len() and slices [a:b] (step 1), as int64 arrays."""

    def __init__(self, shards: list[np.ndarray]):
        self.shards = [s for s in shards if len(s)]
        self.starts = np.cumsum([0] + [len(s) for s in self.shards])  # (shards + 1,): where each begins

    def __len__(self) -> int:
        return int(self.starts[-1])

    def __getitem__(self, index):
        if not isinstance(index, slice) or index.step not in (None, 1):
            raise TypeError("sharded tokens are read by slices [a:b]")
        start, stop, _ = index.indices(len(self))
        if stop <= start:
            return np.zeros(0, dtype=np.int64)
        first = int(np.searchsorted(self.starts, start, side="right")) - 1
        pieces = []
        while start < stop:
            shard, offset = self.shards[first], start - int(self.starts[first])
            take = min(stop - start, len(shard) - offset)
            pieces.append(np.asarray(shard[offset : offset + take], dtype=np.int64))
            start += take
            first += 1
        return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)

    def chunks(self, size: int):
        """The tokens in order, as int64 arrays of at most `size` (for counting without holding them all)."""
        for start in range(0, len(self), size):
            yield self[start : start + size]
