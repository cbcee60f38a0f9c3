"""Progress output: a live bar on a terminal, plain lines elsewhere, nothing with quiet."""

from __future__ import annotations

import io

from microgpt.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def drive(progress: Progress, total: int = 20) -> None:
    progress.start(total=total)
    for step in range(1, total + 1):
        progress.update(step, loss=2.5, val_loss=2.75 if step >= 10 else None, tokens_per_sec=1234.0)
    progress.close()


def test_a_terminal_gets_a_bar_with_loss_validation_and_speed():
    stream = Terminal()
    drive(Progress(stream=stream))
    out = stream.getvalue()
    assert "20/20" in out and "loss=2.5000" in out and "val=2.7500" in out and "tok/s=1,234" in out
    assert "\r" in out  # redrawn in place, not one line per step


def test_a_log_gets_plain_lines_about_every_tenth_of_the_run():
    stream = io.StringIO()
    drive(Progress(stream=stream), total=20)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 10  # every 2 steps of 20
    assert lines[0].startswith("step 2/20  loss 2.5000  1,234 tok/s  ETA")
    assert lines[-1].startswith("step 20/20  loss 2.5000  val 2.7500")


def test_quiet_prints_nothing_even_on_a_terminal():
    stream = Terminal()
    drive(Progress(quiet=True, stream=stream))
    assert stream.getvalue() == ""


def test_a_resumed_run_counts_from_where_it_was():
    stream = io.StringIO()
    progress = Progress(stream=stream)
    progress.start(total=110, initial=100)
    for step in range(101, 111):
        progress.update(step, loss=1.0, val_loss=None, tokens_per_sec=10.0)
    progress.close()
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("step 101/110") and lines[-1].startswith("step 110/110") and len(lines) == 10
