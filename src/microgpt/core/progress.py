"""Progress reporting: a live bar on a terminal, plain lines otherwise, nothing with quiet.

`Progress` is a training run's: the bar (tqdm) shows step, loss, the losses of
the model's parts where it has several heads, validation loss, tokens/s and the ETA. When output is not a terminal (a log file, CI), a
plain line is printed after the first step (so a log shows at once that the
run is going) and then about every tenth of the run, so logs stay readable; so
is a terminal that reports no width (a bar of 0 columns shows nothing).
`Counter` is the same for any other long job that counts items (eval's
tokens).
"""

from __future__ import annotations

import os
import sys
import time

from tqdm import tqdm


def draws_a_bar(stream) -> bool:
    """Whether `stream` is a terminal with a width to draw a bar in: one that reports 0 columns (a pty whose
    size was never set, as some containers' and CI runners' are) gets plain lines."""
    if not stream.isatty():
        return False
    try:
        return os.get_terminal_size(stream.fileno()).columns > 0
    except (OSError, ValueError):  # no file descriptor to ask: the stream's isatty is all there is
        return True


class Progress:
    def __init__(self, quiet: bool = False, stream=None):
        self.quiet = quiet
        self.stream = stream or sys.stderr
        self.live = not quiet and draws_a_bar(self.stream)
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

    def update(self, step: int, loss: float, val_loss: float | None, tokens_per_sec: float,
               parts: dict[str, float] | None = None, training_rate: float | None = None) -> None:
        """`parts`: the losses of a model's parts beside its own (a lookahead model's heads: "head1" -> loss);
        `training_rate`: tokens/s of training alone (validation and checkpoint writing left out), shown beside
        the overall rate where it differs."""
        if self.quiet:
            return
        parts = parts or {}
        rate = f"{tokens_per_sec:,.0f}"
        if training_rate is not None and f"{training_rate:,.0f}" != rate:
            rate += f" ({training_rate:,.0f} training alone)"
        if self._bar is not None:
            postfix = {"loss": f"{loss:.4f}", **{name: f"{value:.3f}" for name, value in parts.items()},
                       "tok/s": rate}
            if val_loss is not None:
                postfix["val"] = f"{val_loss:.4f}"
            self._bar.set_postfix(postfix, refresh=False)
            self._bar.update(step - self._bar.n)
        elif (step - self._initial) % self._every == 0 or step in (self._initial + 1, self._total):
            done = step - self._initial
            elapsed = time.perf_counter() - self._started
            eta = elapsed / done * (self._total - step) if done else 0.0
            val = f"  val {val_loss:.4f}" if val_loss is not None else ""
            shown_parts = "".join(f"  {name} {value:.3f}" for name, value in parts.items())
            print(f"step {step}/{self._total}  loss {loss:.4f}{shown_parts}{val}  {rate} tok/s  "
                  f"ETA {eta:.0f}s",
                  file=self.stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


class Counter:
    """Progress of a job of `total` items (`unit`, e.g. "char"): a bar on a terminal, else a plain line after the
    first update and about every tenth of the job."""

    def __init__(self, total: int, unit: str, what: str, quiet: bool = False, stream=None):
        self.total, self.unit, self.what, self.quiet = total, unit, what, quiet
        self.stream = stream or sys.stderr
        self._bar = tqdm(total=total, file=self.stream, unit=unit, unit_scale=True, desc=what, dynamic_ncols=True,
                         leave=False) if not quiet and draws_a_bar(self.stream) else None
        self._done, self._next_line = 0, 0
        self._started = time.perf_counter()

    def update(self, done: int) -> None:
        """`done` items of the total are finished."""
        self._done = done
        if self.quiet:
            return
        if self._bar is not None:
            self._bar.update(done - self._bar.n)
        elif done >= self._next_line or done == self.total:
            elapsed = time.perf_counter() - self._started
            eta = elapsed / done * (self.total - done) if done else 0.0
            print(f"{self.what}: {done:,}/{self.total:,} {self.unit}s  ETA {eta:.0f}s", file=self.stream, flush=True)
            self._next_line = done + max(1, self.total // 10)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
