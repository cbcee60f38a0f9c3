"""The watchdog's limit (watchdog.py): generous until two steps are timed, then a multiple of the slowest step
with a floor; an explicit --collective-timeout wins throughout."""

from __future__ import annotations

from microgpt.parallel.watchdog import FLOOR_S, SETUP_S, STEP_MULTIPLE, CollectiveTimeout


def test_the_limit_follows_the_slowest_step_above_a_floor():
    timeout = CollectiveTimeout()
    assert timeout.seconds() == SETUP_S  # the set-up check
    timeout.step_done(now=100.0)  # the first step, compiling included, is never timed
    assert timeout.seconds() == SETUP_S
    timeout.step_done(now=100.5)
    assert timeout.seconds() == FLOOR_S  # 20 x 0.5 s is under the floor
    timeout.step_done(now=110.5)  # a 10 s step (rank 0 validating, say)
    timeout.step_done(now=111.0)  # a quick one does not lower it again
    assert timeout.seconds() == STEP_MULTIPLE * 10.0


def test_an_explicit_timeout_holds_from_the_start():
    timeout = CollectiveTimeout(5.0)
    assert timeout.seconds() == 5.0
    timeout.step_done(now=0.0)
    timeout.step_done(now=100.0)
    assert timeout.seconds() == 5.0
