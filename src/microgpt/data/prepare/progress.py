"""Progress of a pass over the inputs, in bytes on disk: a live bar with MB/s and the ETA on a terminal
(tqdm, as training's bar), a plain line after the first block and about every tenth of the pass otherwise
(a log, CI), nothing with --quiet. All of it goes to stderr."""

from __future__ import annotations

import sys
import time

from tqdm import tqdm

MB = 1e6


class BytesProgress:
    def __init__(self, total: int, what: str, quiet: bool = False, stream=None):
        self.total, self.what, self.quiet = total, what, quiet
        self.stream = stream or sys.stderr
        self.done = 0
        self._started = time.perf_counter()
        self._next_line = 0
        self._bar = None
        if not quiet and self.stream.isatty():
            self._bar = tqdm(total=total, file=self.stream, unit="B", unit_scale=True, unit_divisor=1000, desc=what,
                             dynamic_ncols=True, leave=False)

    def update(self, done: int) -> None:
        """The pass has read `done` bytes of the inputs."""
        self.done = done
        if self.quiet:
            return
        if self._bar is not None:
            self._bar.update(done - self._bar.n)
        elif done >= self._next_line:
            elapsed = time.perf_counter() - self._started
            rate = done / elapsed / MB if elapsed > 0 else 0.0
            eta = elapsed / done * (self.total - done) if done else 0.0
            print(f"{self.what}: {done / MB:,.1f}/{self.total / MB:,.1f} MB  {rate:,.1f} MB/s  ETA {eta:.0f}s",
                  file=self.stream, flush=True)
            self._next_line = done + max(1, self.total // 10)

    def seconds(self) -> float:
        return time.perf_counter() - self._started

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def note(text: str, quiet: bool, stream=None) -> None:
    """One line of what prepare is doing, on stderr, unless --quiet."""
    if not quiet:
        print(text, file=stream or sys.stderr, flush=True)
