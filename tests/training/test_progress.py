"""Progress output: a live bar on a terminal, plain lines elsewhere, nothing with quiet."""

from __future__ import annotations

import io

from microgpt.core.progress import Progress


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
    assert len(lines) == 11  # the first step at once, then every 2 steps of 20
    assert lines[0].startswith("step 1/20  loss 2.5000  1,234 tok/s  ETA")
    assert lines[1].startswith("step 2/20  loss 2.5000  1,234 tok/s  ETA")
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


def test_a_counter_in_a_log_says_how_far_a_long_job_is_at_once_and_every_tenth():
    from microgpt.core.progress import Counter

    stream = io.StringIO()
    counter = Counter(1000, "character", "scoring f.txt", stream=stream)
    for done in range(50, 1001, 50):
        counter.update(done)
    counter.close()
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("scoring f.txt: 50/1,000 characters  ETA")
    assert lines[-1].startswith("scoring f.txt: 1,000/1,000 characters")
    assert 10 <= len(lines) <= 12


def test_a_counter_on_a_terminal_is_a_bar_and_quiet_is_silent():
    from microgpt.core.progress import Counter

    stream = Terminal()
    counter = Counter(100, "character", "scoring", stream=stream)
    counter.update(100)
    counter.close()
    assert "scoring" in stream.getvalue() and "\r" in stream.getvalue()
    quiet = Terminal()
    Counter(100, "character", "scoring", quiet=True, stream=quiet).update(50)
    assert quiet.getvalue() == ""


def test_the_rate_of_training_alone_is_shown_beside_the_overall_one():
    stream, terminal = io.StringIO(), Terminal()
    for progress, last in ((Progress(stream=stream), 1234.0), (Progress(stream=terminal), 1500.0)):
        progress.start(total=2)
        progress.update(1, loss=2.5, val_loss=None, tokens_per_sec=1234.0, training_rate=1500.0)
        progress.update(2, loss=2.5, val_loss=None, tokens_per_sec=1234.0, training_rate=last)
        progress.close()
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("step 1/2  loss 2.5000  1,234 (1,500 training alone) tok/s  ETA")
    assert lines[1].startswith("step 2/2  loss 2.5000  1,234 tok/s  ETA")  # the same: shown once
    assert "tok/s=1,234 (1,500 training alone)" in terminal.getvalue()
