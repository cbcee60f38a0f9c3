"""Work on blocks in worker processes, with the results in input order and a bounded number in flight.

`ordered_map(work, items, workers, job)` yields work(item) for each item, in order. With one worker it all
runs in this process; with more, a pool of spawned processes (fresh interpreters: nothing of this one's
threads or of the tokenizers library's thread pool is forked), each set up by `work.start(job)`, holds at
most WINDOW_PER_WORKER blocks per worker at once, so that reading never runs ahead of tokenizing by more
than a few blocks. Workers ignore Ctrl-C and are ended by this process when it stops early, and end themselves
when it ends without a word (kill -9); a worker that dies (or cannot start) is a DataError, not a hang. Each
tokenizes on one thread.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from microgpt.core.errors import DataError
from microgpt.data.prepare import blocks, work
from microgpt.data.prepare.inputs import InputFile

WINDOW_PER_WORKER = 2


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def useful_workers(workers: int, inputs: list[InputFile]) -> int:
    """At most one worker per block of input: starting a process takes longer than a small input does (the
    output is the same for any number)."""
    return max(1, min(workers, sum(file.size for file in inputs) // blocks.BLOCK_BYTES))


def _start_worker(job: dict) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_end_with_parent, daemon=True).start()
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one thread each: the processes are the parallelism
    work.start(job)


def _end_with_parent() -> None:
    """End this worker when the process that started it ends, however it ended: a worker waiting for its next
    block would wait forever once its parent is killed (kill -9), holding the pool's pipes open, and with them
    multiprocessing's resource tracker. A spawned process holds the read end of a pipe only its parent writes to
    (multiprocessing's parent sentinel), which the kernel closes when the parent dies: no polling, and the same
    on every platform, unlike Linux's PR_SET_PDEATHSIG (which also fires when the parent's starting thread ends)."""
    multiprocessing.parent_process().join()
    os._exit(1)


def ordered_map(fn: Callable, items: Iterable, workers: int, job: dict) -> Iterator:
    if workers <= 1:
        work.start(job)
        for item in items:
            yield fn(item)
        return
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"), initializer=_start_worker,
                               initargs=(job,))
    finished = False
    try:
        pending: deque = deque()
        for item in items:
            pending.append(pool.submit(fn, item))
            if len(pending) >= WINDOW_PER_WORKER * workers:
                yield _result(pending.popleft())
        while pending:
            yield _result(pending.popleft())
        finished = True
    finally:
        if not finished:  # an error, Ctrl-C or SIGTERM: end the workers now, not after their blocks
            _end_workers(pool)
        pool.shutdown(wait=True, cancel_futures=True)


def _end_workers(pool: ProcessPoolExecutor) -> None:
    """Terminate the pool's workers and wait until they have ended. One ended while sending a result leaves
    the pool's thread waiting for the rest of it, and the pool's shutdown waiting on that thread, for ever: the
    pipe stays open while this process holds its write end, which it never writes. So that end is closed, and
    the thread reads the end of the pipe and finds the pool broken."""
    processes = list(pool._processes.values())
    for process in processes:
        with contextlib.suppress(OSError):
            process.terminate()
    for process in processes:
        multiprocessing.connection.wait([process.sentinel])
    pool._result_queue._writer.close()


def _result(future):
    try:
        return future.result()
    except BrokenProcessPool:
        raise DataError("a worker process stopped or could not start; run with --workers 1 (from Python, call "
                        "prepare from a script whose top level is guarded by if __name__ == '__main__')") from None
