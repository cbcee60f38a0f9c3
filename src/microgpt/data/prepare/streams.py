"""Opening an input: its bytes, decompressed where its name says (.gz and .xz by the standard library, .zst by
zstandard), as a stream read a block at a time, and how far into the file on disk the reading has got (what
the progress bar counts). A damaged or truncated compressed file is a DataError naming it: gzip and lzma say
so at the cut; zstandard's reader ends there without a word, so a .zst file's frames are walked first. So is
one that decompresses to more than MAX_EXPANSION times its size on disk (and MIN_EXPANDED): text compresses
by ten or so, a stream of one repeated byte by tens of thousands (1 GB of zeros is a 32 KB .zst), which
would otherwise be read, and tokenized, to its end.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import lzma
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from microgpt.core.errors import DataError
from microgpt.data.prepare.inputs import InputFile

COPY_CHUNK = 1 << 22
ZSTD_MAGIC = 0xFD2FB528
ZSTD_SKIPPABLE = 0x184D2A50  # the magic of a skippable frame, any of its last 4 bits
MAX_EXPANSION = 1000  # a compressed file may decompress to this many times its size on disk,
MIN_EXPANDED = 64 * 1024**2  # or to this many bytes, whichever is more


class Opened:
    """An input open for reading: `stream` gives its (decompressed) bytes; `position()` is how many bytes of
    the file on disk have been read."""

    def __init__(self, file: InputFile, raw: io.BufferedReader, stream):
        self.file, self.raw, self.stream = file, raw, stream

    def position(self) -> int:
        try:
            return self.raw.tell()
        except (OSError, ValueError):
            return self.file.size


@contextlib.contextmanager
def opened(file: InputFile) -> Iterator[Opened]:
    """The input open for reading, closed after. A DataError for one that cannot be opened, and for a damaged
    compressed stream (EOFError for a cut one, the codecs' own errors), naming the file."""
    try:
        raw = open(file.path, "rb")  # noqa: SIM115 - closed below, after the decompressor over it
    except OSError as exc:
        raise DataError(f"{file.path} cannot be read ({exc.strerror or exc})") from None
    with raw:
        try:
            with decompressed(file, raw) as stream:
                yield Opened(file, raw, Bounded(file, stream) if file.compression else stream)
        except (EOFError, gzip.BadGzipFile, lzma.LZMAError) as exc:
            raise _damaged(file, exc) from None
        except OSError as exc:
            raise DataError(f"{file.path} cannot be read ({exc.strerror or exc})") from None
        except Exception as exc:
            if type(exc).__module__.split(".")[0] == "zstandard":
                raise _damaged(file, exc) from None
            raise


def decompressed(file: InputFile, raw):
    """A binary stream of the file's bytes, decompressed, over its raw file (a context manager)."""
    if file.compression == ".gz":
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if file.compression == ".xz":
        return lzma.LZMAFile(raw, mode="rb")
    if file.compression == ".zst":
        import zstandard

        check_zstd_frames(raw.fileno())
        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True))
    return contextlib.nullcontext(raw)


class Bounded:
    """A decompressed stream that gives at most MAX_EXPANSION times its file's size (at least MIN_EXPANDED
    bytes), and is a DataError naming the file past that."""

    def __init__(self, file: InputFile, stream):
        self.file, self.stream = file, stream
        self.limit = max(MIN_EXPANDED, MAX_EXPANSION * file.size)
        self.left = self.limit

    def read(self, size: int = -1) -> bytes:
        data = self.stream.read(self.left + 1 if size < 0 else min(size, self.left + 1))
        self.left -= len(data)
        if self.left < 0:
            raise DataError(f"{self.file.path} decompresses to more than {self.limit:,} bytes, over "
                            f"{MAX_EXPANSION:,} times its {self.file.size:,} bytes on disk, which text does not (a "
                            "compression bomb?); decompress it yourself and give the result, or leave it out")
        return data


def check_zstd_frames(fd: int) -> None:
    """EOFError where a .zst file ends inside a frame. Its frames' and blocks' headers (RFC 8878) are read
    and their contents stepped over; anything that is not a frame is left for zstandard to refuse."""
    size, position = os.fstat(fd).st_size, 0

    def number(width: int) -> int:  # the little-endian number at `position`, which moves past it
        nonlocal position
        data = os.pread(fd, width, position)
        if len(data) < width:
            raise EOFError(f"it ends inside a frame, at byte {size:,}")
        position += width
        return int.from_bytes(data, "little")

    while position < size:
        magic = number(4)
        if magic & ~0xF == ZSTD_SKIPPABLE:
            position += number(4)
        elif magic != ZSTD_MAGIC:
            return
        else:
            descriptor = number(1)
            single = descriptor >> 5 & 1  # no window byte; a content size of 1 byte where its flag says 0
            position += 1 - single + (0, 1, 2, 4)[descriptor & 3] + (single, 2, 4, 8)[descriptor >> 6]
            last = 0
            while not last:
                header = number(3)
                last, kind, length = header & 1, header >> 1 & 3, header >> 3
                position += 1 if kind == 1 else length  # an RLE block holds one byte
            position += 4 * (descriptor >> 2 & 1)  # the checksum
    if position > size:
        raise EOFError(f"it ends inside a frame, at byte {size:,}")


def _damaged(file: InputFile, exc: BaseException) -> DataError:
    what = {".gz": "gzip", ".xz": "xz", ".zst": "zstandard"}.get(file.compression, "")
    return DataError(f"{file.path} is not a whole {what} file ({exc or type(exc).__name__}); it is damaged or cut "
                     "short: compress it again, or leave it out")


@contextlib.contextmanager
def seekable_copy(file: InputFile, stream) -> Iterator[Path]:
    """A compressed Parquet file decompressed into a temporary file (Parquet is read from its end first, which a
    stream cannot do); the path of the file itself when it is not compressed."""
    if not file.compression:
        yield file.path
        return
    with tempfile.TemporaryDirectory(prefix="microgpt-prepare-") as directory:
        copy = Path(directory) / file.path.name.removesuffix(file.path.suffix)
        with open(copy, "wb") as out:
            shutil.copyfileobj(stream, out, COPY_CHUNK)
        yield copy
