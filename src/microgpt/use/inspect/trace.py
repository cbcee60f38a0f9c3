"""`LoadedModel.trace(text)`: one pass of the model over a text, every node's output kept by its path as a
[positions, width] host array, the tokens beside them (TransformerLens' run_with_cache, for every family).

    t = microgpt.load("checkpoints/run").trace("To be, or not to be")
    t.paths()                         # every path, in the order the graph runs them
    t["blocks.1.attn.heads"]          # (positions, d): the heads' outputs side by side
    t["blocks.1.attn.heads[2]"]       # (positions, width of head 2)
    t.tokens                          # the tokens as text, one per position
    t.attention(1, 2)                 # (positions, positions): layer 1's head 2 (attention.py)
    t.logit_lens()                    # each residual stream point through the final norm and head (lens.py)

A text longer than seq_len runs in windows of seq_len, each from its own start (as training reads one): no
position sees one in an earlier window.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from microgpt.use.inspect.attention import head_weights
from microgpt.use.inspect.lens import LogitLens, logit_lens
from microgpt.use.inspect.paths import attention_paths, node_paths, path_widths, resolve
from microgpt.use.inspect.windows import Graph, Span


@dataclass
class Trace:
    """One pass over a text (`LoadedModel.trace`): `t[path]` each node's output, (positions, width); `t.ids` and
    `t.tokens` the text's tokens; `t.logits`; `t.attention(layer, head)`; `t.logit_lens()`."""

    graph: Graph
    ids: np.ndarray  # (N,) the token ids
    values: dict[int, np.ndarray]  # value id -> (N, width)
    spans: list[Span]  # the batches the positions ran in

    @property
    def tokens(self) -> list[str]:
        """Each position's token as text."""
        return [self.graph.tokenizer.decode([int(i)]) for i in self.ids]

    def paths(self) -> list[str]:
        """Every node output's path, in the order the graph makes them."""
        return list(node_paths(self.graph.program))

    def widths(self) -> dict[str, int]:
        """Each path's width (the vocabulary for logits)."""
        return path_widths(self.graph.program)

    def __getitem__(self, path: str) -> np.ndarray:
        """(positions, width) of `path`'s output; `path[i]` the columns of an attention node's head i."""
        place = resolve(self.graph, path)
        rows = self.values[place.value]
        return rows if place.columns is None else rows[:, place.columns[0] : place.columns[1]]

    def __contains__(self, path: str) -> bool:
        return path in node_paths(self.graph.program)

    @property
    def logits(self) -> np.ndarray:
        """(positions, vocab): the graph's logits output, row t scoring the token after position t."""
        return self.values[self.graph.program.logits]

    def attention_paths(self) -> list[str]:
        """The attention nodes, in order: attention(layer, ...)'s layers."""
        return attention_paths(self.graph.program)

    def attention(self, layer, head: int) -> np.ndarray:
        """(positions, positions): the weights of head `head` of attention node `layer` (its index among
        attention_paths(), or its path), row t over the positions t attends to; windows see only themselves."""
        return head_weights(self, layer, head)

    def logit_lens(self, top: int = 5, head: str | None = None) -> LogitLens:
        """What each residual stream point would predict through the final norm and head (lens.py)."""
        return logit_lens(self, top, head)


def trace_text(graph: Graph, text, edits: dict | None = None) -> Trace:
    """The Trace of `text` (a string, or token ids), with `edits` (node index -> port -> edits) applied."""
    ids = graph.ids(text)
    wanted = [vid for node in graph.program.nodes for vid in node.outputs.values()]
    values, spans = graph.forward(ids, wanted, edits)
    return Trace(graph, ids, values, spans)
