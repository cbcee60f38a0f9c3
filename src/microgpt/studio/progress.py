"""Where a training run is, live, for its row in Watch: step of total, ETA, tokens/s, latest validation loss.

`Progress` follows a run's metrics log (metrics.Tail) from near its end (a resumed run's long history is not
read again) and gives {"step", "steps", "time", "tokens_per_s", "eta_s", "val_loss"} from its last record:
tokens/s is the studio's one figure (metrics.add_speed), as the chart and Compare show it, and the ETA the
steps left at that speed (None where not known yet: the speed needs a record with a time, the validation loss
its first evaluation). A log replaced (a new run's staged log renamed into place) is followed anew.
"""

from __future__ import annotations

import os
from pathlib import Path

from microgpt.studio.metrics import Tail, add_speed, log_of

START_BYTES = 64 * 1024  # how far from its end a log is first read


class Progress:
    def __init__(self, checkpoint: Path, steps: int | None, tokens_per_step: int | None):
        self.checkpoint, self.steps, self.tokens_per_step = checkpoint, steps, tokens_per_step
        self.tail = None
        self.last: dict | None = None  # the last record with a time
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
                self.last = record
            if "val_loss" in record:
                self.val_loss = record["val_loss"]
        step, seconds = (self.last["step"], self.last["time"]) if self.last else (None, None)
        speed = None
        if self.last is not None:
            add_speed(self.last, self.tokens_per_step)
            speed = self.last.get("tokens_per_s")
        eta = (self.steps - step) * self.tokens_per_step / speed if speed and self.steps is not None else None
        return {"step": step, "steps": self.steps, "time": seconds, "val_loss": self.val_loss, "tokens_per_s": speed,
                "eta_s": max(0.0, eta) if eta is not None else None}
