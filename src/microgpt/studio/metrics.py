"""A run's metrics log (`<checkpoint>.metrics.jsonl`) as the studio's curves read it.

`read_history` reads the log and returns it, with `tokens_per_s` at each record (`add_speed`: the studio's one
tokens/s, which Watch's row and Compare show too, and the page says what it counts), as columns of at most `points` values
each: consecutive records are averaged in buckets, so that a run of 100,000 steps is a few thousand points
(a log of more than SAMPLES records a bucket is read as an even sample of SAMPLES a bucket, with every
validation record: `sampled`). `Tail` follows a log as it grows, from a byte offset,
line by line (a line is read once it is whole), and says when the log was replaced (a resume cuts it back, a
new run starts it again), so the page reloads the history. `charts_of` says which chart draws each figure:
the validation loss with the loss, a figure a family logs per part on one chart of its parts (an ensemble's
`expert2_write_norm` with the other experts' write norms, a lookahead's `head1_loss`, `head2_loss` on one
"head losses" chart, apart from the main loss), and every other figure on its own. An ensemble's log with the
old numbering is read in today's (training/plot.py's `renumbered`): the prior is expert 0.
"""

from __future__ import annotations

import json
import math
import os
import stat
import warnings
from pathlib import Path

import numpy as np

from microgpt.core.user_files import open_regular, skip_line
from microgpt.training.plot import PART_METRIC, renumbered
from microgpt.training.run_files import RunPaths

DEFAULT_POINTS = 2000
LAST_BYTES = 16 * 1024  # the end of a log that holds its last record
SAMPLES = 3  # records read per bucket of a long log's history (read_history)
CHUNK = 4 * 2**20  # the block a log is read in
MAX_LINE = 64 * 1024  # a record is a few hundred bytes
HISTORIES: dict = {}  # the histories last read, by log, its identity, size and time, and what was asked
MAX_HISTORIES = 64  # a few kilobytes to a megabyte each
TITLES = {"loss": "loss (training, and validation as points)", "lr": "learning rate", "grad_norm": "gradient norm",
          "tokens_per_s": "tokens/s"}


def log_of(checkpoint: Path) -> Path:
    """The log a run writes now: `<log>.new` while a new run has not yet replaced the old checkpoint."""
    log = RunPaths(checkpoint).metrics
    staged = log.with_name(log.name + ".new")
    return staged if staged.is_file() and (not log.is_file() or staged.stat().st_mtime >= log.stat().st_mtime) else log


def records_of(lines: list[str]) -> list[dict]:
    """The whole records among lines: JSON objects with a step (a line cut short by a kill is left out)."""
    records = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("step"), int):
            records.append({k: v for k, v in renumbered(record).items()
                            if isinstance(v, (int, float)) and not isinstance(v, bool)})
    return records


def with_speed(records: list[dict], tokens_per_step: int | None) -> list[dict]:
    """Each record with its tokens_per_s (add_speed), where the tokens per step are known."""
    for record in records:
        add_speed(record, tokens_per_step)
    return records


def add_speed(record: dict, tokens_per_step: int | None) -> None:
    """The record's tokens_per_s: the tokens of its steps (steps x batch x context) over its time, both counted
    from the run's start (a record's time goes on across resumes), so validation and saving are included."""
    if tokens_per_step and record.get("time", 0) > 0:
        record["tokens_per_s"] = record["step"] * tokens_per_step / record["time"]


def each_record(log: Path, tokens_per_step: int | None):
    """Every whole record of a log with its tokens_per_s (as with_speed gives it), read a line at a time (a line
    past MAX_LINE in pieces, none of them a record), so that a download of a long log streams in little memory."""
    with open_regular(log) as f:
        while line := f.readline(MAX_LINE):
            for record in records_of([line.decode("utf-8", errors="replace")]):
                add_speed(record, tokens_per_step)
                yield record


def columns_of(records: list[dict], points: int) -> dict[str, list]:
    """Records as columns (None where a record lacks the key), averaged in buckets down to at most `points`."""
    keys = sorted({key for record in records for key in record})
    if not records:
        return {}
    table = np.array([[record.get(key, math.nan) for key in keys] for record in records], dtype=np.float64)
    if len(records) > points:
        size = math.ceil(len(records) / points)
        pad = (-len(records)) % size
        padded = np.vstack([table, np.full((pad, len(keys)), math.nan)]).reshape(-1, size, len(keys))
        with warnings.catch_warnings():  # a bucket without a key (val_loss between validations) is NaN, as meant
            warnings.simplefilter("ignore", RuntimeWarning)
            table = np.nanmean(padded, axis=1)
        table[:, keys.index("step")] = np.nanmax(padded[:, :, keys.index("step")], axis=1)
    return {key: [None if math.isnan(v) else (int(v) if key == "step" else float(v)) for v in table[:, i]]
            for i, key in enumerate(keys)}


def chart_of(key: str) -> dict:
    """The chart that draws a figure ({"chart": its id, "title"}) and the figure's name in its legend."""
    part = PART_METRIC.fullmatch(key)
    if key == "val_loss":
        chart, label = "loss", key
    elif part and part.group(3) == "loss":  # per-head losses: their own chart, not mixed into the main loss
        chart, label = f"{part.group(1)}_loss", f"{part.group(1)} {part.group(2)}"
    elif part:
        chart, label = part.group(3), f"{part.group(1)} {part.group(2)}"
    else:
        chart, label = key, key
    title = TITLES.get(chart) or (f"{part.group(1)} losses" if part and part.group(3) == "loss"
                                  else chart.replace("_", " "))
    return {"chart": chart, "title": title, "label": label}


def charts_of(keys) -> dict[str, dict]:
    """chart_of for each figure among keys (not the step and time, the x axes)."""
    return {key: chart_of(key) for key in keys if key not in ("step", "time")}


def read_history(log: Path, tokens_per_step: int | None, points: int = DEFAULT_POINTS) -> dict:
    """The log's curves as columns, with the byte offset and identity to follow it from. The log is read once,
    in blocks of CHUNK bytes (never whole); the history of a log unchanged since it was last read is the one
    read then."""
    try:
        with open_regular(log) as f:
            info = os.fstat(f.fileno())
            key = (str(log), info.st_ino, info.st_size, info.st_mtime_ns, tokens_per_step, points)
            if key in HISTORIES:  # a log that has not changed since (a finished run opened again)
                return HISTORIES[key]
            lines, count, offset = sampled(f, max(1, info.st_size // (points * SAMPLES)))
    except FileNotFoundError:
        return {"columns": {}, "charts": {}, "offset": 0, "inode": None, "records": 0}
    records = with_speed(records_of(b"\n".join(lines).decode("utf-8", errors="replace").splitlines()),
                         tokens_per_step)
    columns = columns_of(records, points)
    history = {"columns": columns, "charts": charts_of(columns), "offset": offset, "inode": info.st_ino,
               "records": count}
    if len(HISTORIES) >= MAX_HISTORIES:
        del HISTORIES[next(iter(HISTORIES))]
    HISTORIES[key] = history
    return history


def sampled(f, gap: int) -> tuple[list[bytes], int, int]:
    """(the lines of an open log that a history reads, how many whole lines it has, the bytes they take): every
    line where lines are longer than `gap` bytes; past that an even sample (the line at every `gap`-th byte),
    and every validation record and the last line, so that a long log opens in a fraction of the time that
    reading every line would take."""
    picked: dict[int, bytes] = {}  # lines by where they start
    count = offset = read = 0
    rest, aim = b"", 0
    while block := f.read(CHUNK):
        data, base = rest + block, read - len(rest)
        read += len(block)
        cut = data.rfind(b"\n") + 1
        whole, rest = data[:cut], data[cut:]
        if not whole:
            continue
        lines = whole.count(b"\n")
        count, offset = count + lines, base + cut
        if gap * lines <= 2 * cut:  # lines at least half a gap long: each one is read
            start = 0
            for line in whole[:-1].split(b"\n"):
                picked[base + start] = line
                start += len(line) + 1
            continue
        while aim < offset:  # the line holding byte `aim`
            start = whole.rfind(b"\n", 0, aim - base) + 1
            end = whole.find(b"\n", aim - base)
            picked[base + start] = whole[start:end]
            aim = max(aim + gap, base + end + 1)
        found = whole.find(b'"val_')
        while found >= 0:  # a validation record: each one is drawn
            start, end = whole.rfind(b"\n", 0, found) + 1, whole.find(b"\n", found)
            picked[base + start] = whole[start:end]
            found = whole.find(b'"val_', end)
        start = whole.rfind(b"\n", 0, cut - 1) + 1  # the last line: where the curve ends
        picked[base + start] = whole[start:cut - 1]
    return [picked[start] for start in sorted(picked)], count, offset


def last_record(log: Path) -> dict | None:
    """The last whole record of a log, from its last few kilobytes (None when it has none)."""
    try:
        with open_regular(log) as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - LAST_BYTES))
            data = f.read()
    except OSError:
        return None
    records = records_of(data[: data.rfind(b"\n") + 1].decode("utf-8", errors="replace").splitlines())
    return records[-1] if records else None


class Tail:
    """The records appended to a log since `offset`; `replaced` once the log is another file or shorter."""

    def __init__(self, log: Path, offset: int, inode: int | None):
        self.log, self.offset, self.inode = log, offset, inode
        self.replaced = False

    def read(self) -> list[dict]:
        """The whole records appended since the last read; none from a link planted in the log's place (it
        is opened without following one, as a run writes it)."""
        try:
            descriptor = os.open(self.log, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            self.replaced = self.inode is not None  # a staged log renamed into place, or a log removed
            return []
        except OSError:  # a symlink (ELOOP), or unreadable: nothing to show
            return []
        with os.fdopen(descriptor, "rb") as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode):
                return []
            if (self.inode is not None and info.st_ino != self.inode) or info.st_size < self.offset:
                self.replaced = True
                return []
            if info.st_size == self.offset:
                return []
            f.seek(self.offset)
            data = f.read(min(info.st_size - self.offset, CHUNK))  # a block a read at most: the rest comes next
            if b"\n" not in data and len(data) >= MAX_LINE:  # a line past MAX_LINE is no record: read past it
                self.offset += len(data) + skip_line(f)
                return []
        whole = data[: data.rfind(b"\n") + 1]
        self.offset += len(whole)
        if self.inode is None:
            self.inode = info.st_ino
        return records_of(whole.decode("utf-8", errors="replace").splitlines())
