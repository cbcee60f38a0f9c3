"""Opening an input: its bytes, decompressed where its name says (.gz and .xz by the standard library, .zst by
zstandard), as a stream read a block at a time, and how far into the file on disk the reading has got (what
the progress bar counts). A damaged or truncated compressed file is a DataError naming it.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import lzma
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from microgpt.core.errors import DataError
from microgpt.data.prepare.inputs import InputFile

COPY_CHUNK = 1 << 22


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
                yield Opened(file, raw, stream)
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

        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True))
    return contextlib.nullcontext(raw)


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
