"""Reading a file a user may have replaced with anything: only a regular file, and only so many bytes of it.

`open_regular` opens without blocking (a FIFO with no writer would wait forever) and refuses what is not a
regular file (a FIFO, a device such as /dev/zero, which never ends and whose size reads as 0, a socket, or a
link to one); `read_regular` reads at most `limit` bytes of one, and `read_json` parses them (`parse_json`),
so that a number of more digits than Python converts or a nesting deeper than its recursion limit is a
ValueError saying so, not a traceback. `bounded_lines` reads a log a line at a time, leaving out a line longer
than its bound (read past a block at a time by `skip_line`, never held whole), and `read_tail` reads the last
lines of a log from its end, so that neither costs more memory however large the file (a log of zeros with no
newline is one endless line).
Each raises an OSError (a ValueError for what the JSON holds) whose text the caller words into its own one line,
naming the file.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


class TooLarge(OSError):
    """A file over the bytes its reader takes."""

    def __init__(self, path: str | Path, limit: int):
        super().__init__(0, f"it is over {limit:,} bytes", str(path))
        self.limit = limit


def open_regular(path: str | Path) -> BinaryIO:
    """`path` opened for reading in binary, when it is a regular file; an OSError otherwise."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = ("a directory" if stat.S_ISDIR(mode) else "a pipe" if stat.S_ISFIFO(mode) else "a socket"
                    if stat.S_ISSOCK(mode) else "a device")
            raise OSError(0, f"it is {kind}, not a regular file", str(path))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | Path, limit: int) -> bytes:
    """The bytes of the regular file `path`, at most `limit` of them: TooLarge past that (told by its size before
    anything is read, and by the read where it grew meanwhile), or the OSError of open_regular."""
    with open_regular(path) as f:
        if os.fstat(f.fileno()).st_size > limit:
            raise TooLarge(path, limit)
        data = f.read(limit + 1)
    if len(data) > limit:
        raise TooLarge(path, limit)
    return data


def bounded_lines(f: BinaryIO, limit: int) -> Iterator[bytes]:
    """The lines of the binary file `f` from where it stands, each of at most `limit` bytes (with its newline); a
    longer line is read past in pieces of `limit` and left out."""
    while line := f.readline(limit):
        if len(line) == limit and not line.endswith(b"\n"):  # a piece of a longer line: skip to its end
            skip_line(f)
            continue
        yield line


def skip_line(f: BinaryIO, block: int = 2**20) -> int:
    """Read the seekable binary file `f` past the end of the line it stands in (its newline, or the file's end), a
    block at a time, and leave it there; the bytes passed."""
    passed = 0
    while chunk := f.read(block):
        end = chunk.find(b"\n")
        if end >= 0:
            f.seek(end + 1 - len(chunk), os.SEEK_CUR)
            return passed + end + 1
        passed += len(chunk)
    return passed


def read_tail(path: str | Path, limit: int) -> list[bytes]:
    """The lines that start in the last `limit` bytes of the regular file `path` (every line of a shorter one),
    without their newlines, the last perhaps unfinished (a log being written); the OSError of open_regular."""
    with open_regular(path) as f:
        start = max(0, os.fstat(f.fileno()).st_size - limit)
        f.seek(max(0, start - 1))
        data = f.read(limit + (start > 0))
    if start > 0:
        data = data[data.find(b"\n") + 1:] if b"\n" in data else b""  # from the first line that starts inside
    return [line for line in data.split(b"\n") if line]


def read_json(path: str | Path, limit: int):
    """The JSON value of the regular file `path` of at most `limit` bytes: read_regular's OSError, or
    parse_json's ValueError."""
    return parse_json(read_regular(path, limit))


def parse_json(data: bytes | str):
    """The JSON value of data; a ValueError whose text completes "the file is ...": not JSON, JSON nested too
    deeply, or JSON with too long a number."""
    try:
        return json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"not JSON ({exc})") from None
    except RecursionError:
        raise ValueError("JSON nested too deeply to read") from None
    except ValueError:  # int(): more digits than sys.get_int_max_str_digits()
        raise ValueError("JSON with a number of too many digits to read") from None
