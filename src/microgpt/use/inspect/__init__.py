"""Inside a trained model (docs/inspect.md): every node's output by its path (trace.py), each head's attention
(attention.py), the logit lens (lens.py), and the loss with nodes ablated or patched (interventions.py), drawn by
figures.py.

Every family is run through its graph (model/graph's of_family; a graph run's own), so the paths are the graph
document's and one piece of code serves them all. It imports what use/ imports; `LoadedModel.trace` and
`.loss`, the `inspect` command and the studio import it.
"""

from __future__ import annotations

from microgpt.use.inspect.interventions import HeadAblation, ablated_loss, score_heads
from microgpt.use.inspect.lens import LogitLens
from microgpt.use.inspect.trace import Trace, trace_text

__all__ = ["HeadAblation", "LogitLens", "Trace", "ablated_loss", "score_heads", "trace_text"]
