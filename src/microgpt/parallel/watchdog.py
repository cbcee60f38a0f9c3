"""How long a rank waits for the others in a collective before it gives up on them (--collective-timeout).

A rank that stops (SIGSTOP, a stuck filesystem, a dead node that keeps its
socket) would leave the others waiting in the next all-reduce for ever; the MPI
communicator (mpi.py) waits at most `CollectiveTimeout.seconds()` instead.
Given --collective-timeout, that is the limit of every watched collective. Without it
the set-up check and the first two steps, which include one-time work (numba or
CUDA compiling, a cold filesystem), get SETUP_S; from then on the limit is
STEP_MULTIPLE times the slowest step timed so far, at least FLOOR_S. A step is
timed from one loss agreement to the next, as every rank lives it: it includes
rank 0's validation passes and saves that the others wait for.
"""

from __future__ import annotations

import time

SETUP_S = 600.0
FLOOR_S = 60.0
STEP_MULTIPLE = 20


class CollectiveTimeout:
    def __init__(self, fixed: float | None = None):
        self.fixed = fixed  # --collective-timeout, or None to derive it from the steps
        self.slowest: float | None = None  # the slowest step timed so far
        self._last: float | None = None  # when the last loss agreement completed

    def seconds(self) -> float:
        """The limit of the next collective."""
        if self.fixed is not None:
            return self.fixed
        return SETUP_S if self.slowest is None else max(FLOOR_S, STEP_MULTIPLE * self.slowest)

    def step_done(self, now: float | None = None) -> None:
        """A loss agreement completed (once per step): time the step since the one before."""
        now = time.monotonic() if now is None else now
        if self._last is not None:
            self.slowest = max(self.slowest or 0.0, now - self._last)
        self._last = now
