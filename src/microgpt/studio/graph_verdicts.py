"""The causality verdicts of the node editor's checks: each run on a worker thread (one at a time, the newest
edit's first: a check not started yet is cancelled when another document comes), in a worker process held to a
time and a memory budget (graph_worker.py: VERDICT_TIME_S, VERDICT_MEMORY), kept by document and run
(vocabulary, context, tokenizer), so a check again, an undo or a save finds it done; and the pace of the last
one, by which a check knows whether to wait for a verdict within its budget.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor

from microgpt.core.checks import format_bytes
from microgpt.model.graph.compile import GraphError
from microgpt.model.graph.program import Program
from microgpt.studio.graph_causality import checked
from microgpt.studio.graph_run import DraftSettings
from microgpt.studio.graph_worker import OverBudget, Worker

CAUSALITY_CACHE = 64  # verdicts kept (by document and run dims): an undo, or a check again after a move, is free
# The causality check's float64 copy of the model takes causality.COPY_BYTES_PER_PARAMETER bytes a parameter,
# and its time grows with them: past this count a graph is left to `microgpt train` to check, so that an edit's
# verdict stays within the editor's pace and far inside VERDICT_MEMORY.
CAUSALITY_MAX_PARAMETERS = 10_000_000

_verdicts: OrderedDict = OrderedDict()  # (document, vocab, T, tokenizer) -> the future of its verdict
_verdicts_lock = threading.Lock()
_checker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="causality")  # one check at a time, in order
_worker = Worker()  # where each runs, within its budget
# A check's budget: above what a check takes at the primitives' limit (MAX_NODES; docs/benchmarks.md, Graphs)
# and what the copy of CAUSALITY_MAX_PARAMETERS takes; past these it is stopped and left to `microgpt train`.
VERDICT_TIME_S = 60.0
VERDICT_MEMORY = 2 * 1024**3  # bytes past the worker's libraries


_pace: dict = {}  # "per_node": seconds the last causality check took per primitive (on this machine, now)


def expected_verdict_s(program: Program) -> float:
    """How long a causality check of this program should take, from the last one's pace (0 before any)."""
    return _pace.get("per_node", 0.0) * len(program.nodes)


def _verdict(program: Program, seq_len: int, tokenizer) -> tuple[dict, GraphError | None]:
    """(the `causality` answer, the GraphError where the graph leaks or None), from the worker process within
    VERDICT_TIME_S and VERDICT_MEMORY (graph_worker.py); past either, the answer says so and nothing is left
    running."""
    started = time.perf_counter()
    try:
        answer, leak = _worker.run(checked, program, seq_len, tokenizer, time_s=VERDICT_TIME_S,
                                   memory_bytes=VERDICT_MEMORY)
    except OverBudget as over:
        cost = (f"took longer than {VERDICT_TIME_S:g} s to check" if over.what == "time" else
                f"needs more than {format_bytes(VERDICT_MEMORY)} of memory to check")
        return {"ok": None, "pending": False, "message": f"not checked here: this graph {cost}, the studio's budget; "
                "microgpt train checks it before its first step"}, None
    finally:
        _pace["per_node"] = (time.perf_counter() - started) / max(1, len(program.nodes))
    return answer, None if leak is None else GraphError(*leak)


def causality_of(program: Program, document: dict, run: DraftSettings) -> Future:
    """The future of the causality verdict (_verdict's), started now or kept from a check of the same document
    and run (so a check again finds it done)."""
    key = (json.dumps(document, sort_keys=True), run.vocab, run.seq_len, run.tokenizer_key)
    with _verdicts_lock:
        future = _verdicts.get(key)
        if future is None or future.cancelled():
            for waiting in _verdicts.values():  # an earlier edit's check not started yet: no one waits for it now
                waiting.cancel()
            future = _verdicts[key] = _checker.submit(_verdict, program, run.seq_len, run.tokenizer())
            if len(_verdicts) > CAUSALITY_CACHE:
                _verdicts.popitem(last=False)
        _verdicts.move_to_end(key)
    return future
