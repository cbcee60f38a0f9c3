"""The node editor's causality check as its worker process runs it (graph_worker.py): the check of one program
on real arrays, and its verdict as plain values that travel back through the pipe whole. graph_verdicts.py sends
it there and keeps the verdicts; the worker imports this module before it sets its memory budget, so the
libraries the check needs are counted in the worker's base, not in the check's budget.
"""

from __future__ import annotations

from threadpoolctl import threadpool_limits

from microgpt.core.errors import ConfigError
from microgpt.model.graph.causality import check_causality
from microgpt.model.graph.compile import GraphError
from microgpt.model.graph.program import Program


def checked(program: Program, seq_len: int, tokenizer) -> tuple[dict, tuple | None]:
    """The verdict, run in the worker: (the answer, the leak as GraphError's arguments, which travel back whole,
    or None); a MemoryError is the worker's to say."""
    with threadpool_limits(1):  # small matrices: one thread is faster, and the runs training keep the cores
        try:
            return {"ok": True, "pending": False, "message": check_causality(program, seq_len, tokenizer)}, None
        except ConfigError as exc:  # a leak (a GraphError at the node where the future enters), or a refusal
            leak = exc if isinstance(exc, GraphError) else GraphError(str(exc))
            return {"ok": False, "pending": False, "message": str(leak)}, (str(leak), leak.path, leak.port, leak.edge)
        except MemoryError:
            raise
        except Exception as exc:  # noqa: BLE001 - whatever stops the check here is said; training checks again
            return {"ok": None, "pending": False, "message": f"the causality check could not run here "
                    f"({type(exc).__name__}: {str(exc)[:120]}); microgpt train checks it before its first step"}, None
