"""`PeakMemory`: how a test says that some work stays small.

"Refused before anything is allocated", "not made one by one": the bytes Python allocated at the peak, which
other jobs' load cannot change, where a time bound would fail on a slow or busy machine.
"""

from __future__ import annotations

import tracemalloc


class PeakMemory:
    """`with PeakMemory() as memory: ...`, then `memory.bytes`: the most Python held at once inside the block,
    above what it held before (tracemalloc, every thread)."""

    def __enter__(self):
        self.bytes = None
        tracemalloc.start()
        return self

    def __exit__(self, *exc) -> None:
        self.bytes = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
