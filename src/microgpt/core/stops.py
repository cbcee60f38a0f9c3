"""A stop asked by a signal, cleaned up after as Ctrl-C is: `stopping_on_signals()` turns SIGTERM and SIGHUP
into `Stopped`, a KeyboardInterrupt, while a block runs, so that what a `finally` removes after Ctrl-C (a
partial dataset, an export's temporary file) is removed for them too, and the command says why it stopped.
"""

from __future__ import annotations

import contextlib
import signal
import threading

STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


class Stopped(KeyboardInterrupt):
    """A signal asked the command to stop; it cleans up as for Ctrl-C."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def stopping_on_signals():
    """SIGTERM and SIGHUP raise Stopped in this thread while the block runs (in the main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise Stopped(signum)

    previous = {signum: signal.signal(signum, stop) for signum in STOP_SIGNALS - {signal.SIGINT}}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
