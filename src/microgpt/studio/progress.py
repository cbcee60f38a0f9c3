"""Where a training run is, live, for its row in Watch: step of total, ETA, tokens/s, latest validation loss.

`Progress` follows a run's metrics log (metrics.Tail) from near its end (a resumed run's long history is not
read again), keeps the last records' steps and times (tokens/s is over SPEED_WINDOW records, as the chart's), and gives {"step", "steps", "time", "tokens_per_s",
"eta_s", "val_loss"} (None where not known yet: the speed needs two records, the validation loss its first
evaluation). A log replaced (a new run's staged log renamed into place) is followed anew.
"""

from __future__ import annotations

import os
from collections import deque
from pathlib import Path

from microgpt.studio.metrics import SPEED_WINDOW, Tail, log_of

START_BYTES = 64 * 1024  # how far from its end a log is first read


class Progress:
    def __init__(self, checkpoint: Path, steps: int | None, tokens_per_step: int | None):
        self.checkpoint, self.steps, self.tokens_per_step = checkpoint, steps, tokens_per_step
        self.tail = None
        self.recent: deque = deque(maxlen=SPEED_WINDOW + 1)  # (step, time): SPEED_WINDOW intervals
        self.val_loss = None

    def open(self) -> Tail:
        log = log_of(self.checkpoint)
        try:
            size = os.stat(log).st_size
        except OSError:
            return Tail(log, 0, None)
        return Tail(log, max(0, size - START_BYTES), None)  # a line cut at the start is no whole record: skipped

    def read(self) -> dict:
        if self.tail is None or self.tail.replaced:
            self.tail = self.open()
        for record in self.tail.read():
            if "time" in record:
                self.recent.append((record["step"], record["time"]))
            if "val_loss" in record:
                self.val_loss = record["val_loss"]
        step, seconds = self.recent[-1] if self.recent else (None, None)
        rate = None
        if len(self.recent) >= 2 and self.recent[-1][1] > self.recent[0][1]:
            rate = (self.recent[-1][0] - self.recent[0][0]) / (self.recent[-1][1] - self.recent[0][1])
        eta = (self.steps - step) / rate if rate and self.steps is not None and step is not None else None
        return {"step": step, "steps": self.steps, "time": seconds, "val_loss": self.val_loss,
                "tokens_per_s": rate * self.tokens_per_step if rate and self.tokens_per_step else None,
                "eta_s": max(0.0, eta) if eta is not None else None}
