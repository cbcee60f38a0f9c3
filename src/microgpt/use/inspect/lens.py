"""`Trace.logit_lens()`: what the residual stream would predict at each point of the model (nostalgebraist's
logit lens): each point through the final LayerNorm and the logits head, by their own kernels, for the top
tokens and the loss of the true next token at every position.

The points are found in the graph, for every family alike: from a `logits` node that reads a `layer_norm`, back
along the stream that the norm reads, through each `add` to its first input (the stream the block added to),
to where the stream starts (the token embedding). In a GPT they are tok_emb, blocks.0.add1, blocks.0.add2, ...,
the last block's add2: the stream after each attention and each feed-forward, the last point giving the model's
own logits. An ensemble's experts each have theirs (`head="expert2.head"`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from microgpt.core.errors import ConfigError
from microgpt.use.evaluate import nll_rows


def lens_heads(program) -> list[int]:
    """Indices of the logits nodes that read a layer_norm, the one on the graph's logits output first."""
    producer = {vid: i for i, n in enumerate(program.nodes) for vid in n.outputs.values()}
    heads = [i for i, node in enumerate(program.nodes) if node.op.name == "logits"
             and program.nodes[producer.get(node.inputs["x"][0], i)].op.name == "layer_norm"]
    return sorted(heads, key=lambda i: program.nodes[i].outputs["out"] != program.logits)


def stream_points(program, head: int) -> tuple[int, list[int]]:
    """(the norm's index, the value ids of the stream points it could read, first to last) of a lens head."""
    producer = {vid: i for i, n in enumerate(program.nodes) for vid in n.outputs.values()}
    norm = producer[program.nodes[head].inputs["x"][0]]
    points = [program.nodes[norm].inputs["x"][0]]
    while points[-1] in producer and program.nodes[producer[points[-1]]].op.name == "add":
        points.append(program.nodes[producer[points[-1]]].inputs["in"][0])
    return norm, points[::-1]


@dataclass
class LogitLens:
    """The lens of a trace through one head: `points` (the stream's paths, first to last), and for each point and
    position the `top` token ids and their probabilities, and `loss`, -log p of the next token (NaN at the last
    position, which has none)."""

    trace: object
    head: str
    points: list[str]
    top_ids: np.ndarray  # (points, positions, top)
    top_probs: np.ndarray  # (points, positions, top)
    loss: np.ndarray  # (points, positions)

    def top_tokens(self, point: int) -> list[list[str]]:
        """The top tokens as text at each position of point `point` (an index into points)."""
        decode = self.trace.graph.tokenizer.decode
        return [[decode([int(i)]) for i in row] for row in self.top_ids[point]]

    def mean_loss(self) -> np.ndarray:
        """(points,): each point's mean loss over the positions that have a next token."""
        return np.nanmean(self.loss, axis=1) if self.loss.shape[1] > 1 else np.full(len(self.points), np.nan)


def lens_logits(trace, norm: int, head: int, value: int) -> np.ndarray:
    """(N, vocab) host logits of the traced value `value` through the nodes norm and head, span by span as the
    trace ran (the same rows in each call of the kernels)."""
    graph = trace.graph
    be, kernels, parts = graph.be, graph.passes.kernels, []
    for span in trace.spans:
        rows = be.from_host(trace.values[value][span.first : span.first + span.rows])
        normed = kernels[norm].forward([rows], span.run)[0][0]
        parts.append(be.to_host(kernels[head].forward([normed], span.run)[0][0]))
    return np.concatenate(parts)


def logit_lens(trace, top: int = 5, head: str | None = None) -> LogitLens:
    program = trace.graph.program
    heads = lens_heads(program)
    if not heads:
        raise ConfigError("this model has no logits node reading a layer_norm, so it has no logit lens")
    names = [program.nodes[i].name for i in heads]
    if head is not None and head not in names:
        raise ConfigError(f"{head!r} is no lens head; the heads are {', '.join(names)}")
    index = heads[0] if head is None else heads[names.index(head)]
    norm, points = stream_points(program, index)
    path_of = {vid: node.name for node in program.nodes for vid in node.outputs.values()}
    top = max(1, min(int(top), program.dims["vocab"]))
    n = len(trace.ids)
    top_ids = np.zeros((len(points), n, top), dtype=np.int64)
    top_probs = np.zeros((len(points), n, top))
    loss = np.full((len(points), n), np.nan)
    for p, value in enumerate(points):
        logits = lens_logits(trace, norm, index, value).astype(np.float64)
        order = np.argsort(-logits, axis=1, kind="stable")[:, :top]
        top_ids[p] = order
        top_probs[p] = np.stack([np.exp(-nll_rows(logits, order[:, j])) for j in range(top)], axis=1)
        loss[p, :-1] = nll_rows(logits[:-1], trace.ids[1:])
    return LogitLens(trace, names[heads.index(index)], [path_of[v] for v in points], top_ids, top_probs, loss)
