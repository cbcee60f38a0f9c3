"""The cpu backend's streams: independent passes run at once, one per thread, each with BLAS in that thread.

On a few cores a small model's step is many short operations: products of
(rows x 64) by (64 x 64), LayerNorms of a few thousand rows. BLAS gains little
from splitting such a product over cores, and the fused kernels run in one
thread, so with one pass over the batch most cores idle most of the time. Run
instead one pass per core over its slice of the batch (model/thread_split.py),
each calling BLAS in its own thread: every operation then runs at one core's
full rate, and nothing waits (docs/cpu.md has the measurements).

`StreamPool.run(tasks)` runs the first task in the calling thread and the others
on worker threads (NumPy's BLAS and the numba kernels, compiled with nogil,
release the GIL), with the BLAS pool set to one thread for the duration and
set back to `threads` afterwards. Each worker task runs in a copy of the caller's context, so
NumPy's error state (`np.errstate`, a context variable) holds in every task. It
returns when every task has ended; the first exception is raised then, so no
task outlives the call (an interrupt can still leave the tasks' work half done,
e.g. some column chunks of an Adam step updated and the others not). One run at
a time: a run asked for while another is going (from a task, or from another
thread) runs its tasks one after another in its own thread.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any

from microgpt.core.threads import blas_thread_setter


class StreamPool:
    def __init__(self, threads: int):
        self.threads = threads
        self._pool: ThreadPoolExecutor | None = None  # made on first use: threads - 1 workers
        self._set_blas_threads = blas_thread_setter()
        self._busy = threading.Lock()  # held while a run's tasks are on the pool

    def run(self, tasks: Sequence[Callable[[], Any]]) -> list[Any]:
        """Each task's result, in order; at most `threads` run at once."""
        if len(tasks) > self.threads:
            raise ValueError(f"{len(tasks)} tasks for {self.threads} streams")
        if len(tasks) <= 1 or not self._busy.acquire(blocking=False):
            return [task() for task in tasks]
        try:
            self._set_blas_threads(1)
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.threads - 1, thread_name_prefix="microgpt-stream")
            others = [self._pool.submit(contextvars.copy_context().run, task) for task in tasks[1:]]
            try:
                first = tasks[0]()
            finally:
                wait(others)  # never return (or raise) while a task still runs
            return [first, *(future.result() for future in others)]
        finally:
            self._set_blas_threads(self.threads)
            self._busy.release()

    def chunks(self, total: int, align: int = 64) -> list[tuple[int, int]]:
        """[start, end) ranges splitting 0..total into at most `threads` parts, each start a multiple of align."""
        if total <= 0:
            return [(0, 0)]
        size = -(-total // self.threads)  # ceil
        size = -(-size // align) * align
        return [(start, min(start + size, total)) for start in range(0, total, size)]

    def close(self) -> None:
        """Stop the worker threads (a later run starts them again)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
