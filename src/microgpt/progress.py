"""Progress reporting for training: a live bar on a terminal, plain lines otherwise, nothing with quiet.

The bar (tqdm) shows step, loss, validation loss, tokens/s and the ETA. When
output is not a terminal (a log file, CI), a plain line is printed about every
tenth of the run instead, so logs stay readable.
"""

from __future__ import annotations

import sys
import time

from tqdm import tqdm


class Progress:
    def __init__(self, quiet: bool = False, stream=None):
        self.quiet = quiet
        self.stream = stream or sys.stderr
        self.live = not quiet and self.stream.isatty()
        self._bar = None
        self._total = self._initial = 0
        self._every = 1
        self._started = 0.0

    def start(self, total: int, initial: int = 0) -> None:
        self._total, self._initial = total, initial
        self._every = max(1, (total - initial) // 10)
        self._started = time.perf_counter()
        if self.live:
            self._bar = tqdm(total=total, initial=initial, file=self.stream, unit="step", dynamic_ncols=True)

    def update(self, step: int, loss: float, val_loss: float | None, tokens_per_sec: float) -> None:
        if self.quiet:
            return
        if self._bar is not None:
            postfix = {"loss": f"{loss:.4f}", "tok/s": f"{tokens_per_sec:,.0f}"}
            if val_loss is not None:
                postfix["val"] = f"{val_loss:.4f}"
            self._bar.set_postfix(postfix, refresh=False)
            self._bar.update(step - self._bar.n)
        elif (step - self._initial) % self._every == 0 or step == self._total:
            done = step - self._initial
            elapsed = time.perf_counter() - self._started
            eta = elapsed / done * (self._total - step) if done else 0.0
            val = f"  val {val_loss:.4f}" if val_loss is not None else ""
            print(f"step {step}/{self._total}  loss {loss:.4f}{val}  {tokens_per_sec:,.0f} tok/s  ETA {eta:.0f}s",
                  file=self.stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
