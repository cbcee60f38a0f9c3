"""stdout and stderr that a closed pipe, a full disk or a hung-up terminal cannot stop a run through.

The progress lines and the summary are not the run's data: when the reader of
`microgpt train | head -1` goes away, or `> /dev/full` fills, a training run
keeps training, saving and logging to its files, and exits with its usual
status at the end. `guard_output` wraps both streams for the length of a
command: the first failed write marks the stream lost (its file descriptor
then points at /dev/null, so nothing at exit complains) and later writes are
dropped. For a command whose output *is* its result (`sample`, `eval`,
`plot`), a lost stdout raises `OutputLost`, and the CLI ends quietly for a
closed pipe, as Unix tools do, or with one line for another failure.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import sys
from collections.abc import Iterator


class OutputLost(Exception):
    """stdout of a command whose output is its result cannot be written; `errno` says why."""

    def __init__(self, error: int, reason: str):
        super().__init__(reason)
        self.errno = error


class GuardedStream(io.TextIOBase):
    """A text stream that, once a write fails, drops what follows (or, when `required`, raises OutputLost)."""

    def __init__(self, stream, required: bool):
        self._stream, self.required = stream, required
        self.lost: OSError | None = None if stream is not None else OSError(errno.EBADF, "it is closed")

    def write(self, text: str) -> int:
        self._guarded(lambda: self._stream.write(text))
        return len(text)

    def flush(self) -> None:
        self._guarded(self._stream.flush if self._stream is not None else None)

    @property
    def closed(self) -> bool:
        """Whether the stream underneath is closed (an atexit hook that kept this stream, as colorama's does,
        asks before it calls isatty)."""
        return self._stream is None or self._stream.closed

    def isatty(self) -> bool:
        return self.lost is None and not self.closed and self._stream.isatty()

    def fileno(self) -> int:
        if self._stream is None:
            raise OSError(errno.EBADF, "the stream is closed")
        return self._stream.fileno()

    @property
    def encoding(self):
        return getattr(self._stream, "encoding", "utf-8")

    @property
    def buffer(self) -> GuardedBuffer:
        """The binary side (what `train --procs` passes its ranks' output through), guarded alike."""
        return GuardedBuffer(self)

    def _guarded(self, action) -> None:
        if self.lost is None and action is not None:
            try:
                action()
            except (OSError, ValueError) as exc:  # ValueError: a stream closed under us
                self._lose(exc if isinstance(exc, OSError) else OSError(errno.EBADF, str(exc)))
        if self.lost is not None and self.required:
            raise OutputLost(self.lost.errno or errno.EIO, self.lost.strerror or str(self.lost))

    def _lose(self, exc: OSError) -> None:
        self.lost = exc
        with contextlib.suppress(OSError, ValueError, AttributeError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())  # so the interpreter's last flush at exit finds nothing to fail
            os.close(devnull)


class GuardedBuffer:
    """Bytes written to a GuardedStream's underlying binary buffer, under the same guard."""

    def __init__(self, text: GuardedStream):
        self._text = text

    def write(self, data: bytes) -> int:
        self._text._guarded(lambda: self._text._stream.buffer.write(data))
        return len(data)

    def flush(self) -> None:
        self._text._guarded(lambda: self._text._stream.buffer.flush())


@contextlib.contextmanager
def guard_output(stdout_required: bool) -> Iterator[None]:
    """sys.stdout and sys.stderr guarded while the body runs (stdout `required` for sample, eval, plot)."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = GuardedStream(sys.stdout, stdout_required), GuardedStream(sys.stderr, False)
    try:
        yield
    finally:
        with contextlib.suppress(OutputLost):
            sys.stdout.flush()
        sys.stdout, sys.stderr = saved
