"""Progress of a pass over the inputs, in MB of text (decompressed), the unit of prepare's summary: a live bar
with MB/s and the ETA on a terminal (tqdm, as training's bar), a plain line after the first block and about
every tenth of the pass otherwise (a log, CI), nothing with --quiet. All of it goes to stderr.

The first pass knows its total text only where no input is compressed (nor Parquet): otherwise it estimates it
from the text read so far per byte on disk ("~" before it); the second pass knows it from the first. The ETA
comes from how far into the inputs on disk the reading is, which is exact in either case.
"""

from __future__ import annotations

import sys
import time

from tqdm import tqdm

MB = 1e6


class BytesProgress:
    def __init__(self, total: int, what: str, quiet: bool = False, stream=None, text_total: int | None = None):
        """total: the inputs' bytes on disk; text_total: their text's, where known (else estimated)."""
        self.total, self.what, self.quiet, self.text_total = total, what, quiet, text_total
        self.stream = stream or sys.stderr
        self.done = self.text = 0
        self._started = time.perf_counter()
        self._next_line = 0
        self._bar = None
        if not quiet and self.stream.isatty():
            self._bar = tqdm(total=text_total or total, file=self.stream, unit="B", unit_scale=True,
                             unit_divisor=1000, desc=f"{what} text", dynamic_ncols=True, leave=False)

    def update(self, done: int, text: int) -> None:
        """The pass has read `done` bytes of the inputs on disk, and `text` bytes of text from them."""
        self.done, self.text = done, text
        if self.quiet:
            return
        total = self._text_total()
        if self._bar is not None:
            self._bar.total = max(total, text)
            self._bar.update(text - self._bar.n)
        elif done >= self._next_line:
            elapsed = time.perf_counter() - self._started
            rate = text / elapsed / MB if elapsed > 0 else 0.0
            eta = elapsed / done * (self.total - done) if done else 0.0
            about = "" if self.text_total is not None else "~"
            print(f"{self.what}: {text / MB:,.1f}/{about}{total / MB:,.1f} MB of text  {rate:,.1f} MB/s  "
                  f"ETA {eta:.0f}s", file=self.stream, flush=True)
            self._next_line = done + max(1, self.total // 10)

    def _text_total(self) -> int:
        """The pass's text: known, or the text so far scaled by the share of the inputs on disk read."""
        if self.text_total is not None:
            return self.text_total
        return round(self.text * self.total / self.done) if self.done else self.total

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
