"""A worker process for the node editor's heaviest work (graph_causality.py: the causality check, which runs the
graph's forward on real arrays), held to a time and a memory budget that a thread cannot be: past its time the
process is killed, and past its memory an allocation fails in it and it is stopped, while the studio answers
every other request as before.

The worker is a fresh interpreter (spawned, not forked: the studio's threads and locks are not copied into it),
started when first needed and again after it is stopped. It imports the editor's modules, sets its address
space to what they took plus `memory_bytes`, says it is ready, and then runs each call it is sent, one at a
time, until the studio's end of the pipe closes (the studio ended, however it ended).
"""

from __future__ import annotations

import multiprocessing
import resource
import threading

START_S = 120.0  # for a worker to import the editor's modules: a slow, loaded machine takes a few seconds
CONTEXT = multiprocessing.get_context("spawn")


class OverBudget(Exception):
    """A call ran past its time or its memory; `what` says which, "time" or "memory"."""

    def __init__(self, what: str):
        super().__init__(what)
        self.what = what


def address_space() -> int:
    """Bytes of address space this process holds now (VmSize)."""
    with open("/proc/self/status", encoding="ascii") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))


def serve(connection, memory_bytes: int) -> None:
    """The worker's loop: each (function, args) sent is answered ("done", its value), or ("memory", None) where
    it ran out of its memory budget."""
    import microgpt.studio.graph_causality  # noqa: F401  the libraries a call needs, counted in its base

    limit = address_space() + memory_bytes
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    connection.send(("ready", None))
    while True:
        try:
            function, args = connection.recv()
        except (EOFError, OSError):  # the studio's end closed: it ended
            return
        try:
            answer = ("done", function(*args))
        except MemoryError:
            answer = ("memory", None)
        connection.send(answer)


class Worker:
    """One worker process, run a call at a time (calls from several threads wait their turn)."""

    def __init__(self):
        self.process = None
        self.connection = None
        self.memory_bytes = None
        self.lock = threading.Lock()

    def run(self, function, *args, time_s: float, memory_bytes: int):
        """function(*args) in the worker, within time_s seconds and memory_bytes of memory past its libraries;
        OverBudget otherwise, the worker stopped. `function` is a module's own function (sent by name)."""
        with self.lock:
            if self.process is None or not self.process.is_alive() or self.memory_bytes != memory_bytes:
                self._start(memory_bytes)
            self.connection.send((function, args))
            if not self.connection.poll(time_s):
                self.stop()
                raise OverBudget("time")
            try:
                kind, value = self.connection.recv()
            except (EOFError, OSError):  # it died: killed for its memory by the system, or crashed
                self.stop()
                raise OverBudget("memory") from None
            if kind == "memory":
                self.stop()  # what it allocated before failing is not all given back: start afresh
                raise OverBudget("memory")
            return value

    def _start(self, memory_bytes: int) -> None:
        self.stop()
        ours, theirs = CONTEXT.Pipe()
        self.process = CONTEXT.Process(target=serve, args=(theirs, memory_bytes), daemon=True,
                                       name="microgpt-studio-graph-worker")
        self.process.start()
        theirs.close()  # the worker's end is its own: when it dies, a read here ends instead of waiting
        self.connection, self.memory_bytes = ours, memory_bytes
        try:
            ready = ours.poll(START_S) and ours.recv()[0] == "ready"
        except (EOFError, OSError):  # it died starting: its base alone is past the memory it may take
            ready = False
        if not ready:
            self.stop()
            raise OverBudget("time")

    def stop(self) -> None:
        """Kill the worker, if there is one (a call it runs ends with it)."""
        if self.process is not None:
            self.process.kill()
            self.process.join()
            self.connection.close()
        self.process = self.connection = None
