"""`Trace.attention(layer, head)`: one head's attention weights over a traced text, from the queries and keys the
trace kept, by the shared attention's own steps (model/attention.py: the head's columns split out, rotated by
the model's RoPE tables where its kernel rotates them) and the backend's masked softmax: the keys the node's mask
hides (the future, a gap's positions) weigh exactly 0, and every row sums to 1.
"""

from __future__ import annotations

import math

import numpy as np

from microgpt.core.errors import ConfigError
from microgpt.model.attention import HeadGroup, hidden_keys, split_heads
from microgpt.use.inspect.paths import attention_paths, head_columns, node_paths


def hidden_mask(mask: str, gap: int, seq_len: int) -> np.ndarray:
    """(T, T) booleans: the keys each query may not see under an attention node's mask."""
    after = np.arange(seq_len)[None, :] - np.arange(seq_len)[:, None]  # key j's distance after query i
    if mask == "causal":
        return after > 0
    if mask == "gap":
        return (after >= 1) & (after <= gap)
    return hidden_keys(mask, seq_len)


def attention_node(trace, layer) -> int:
    """The program index of attention node `layer` (an index among the attention nodes, or a path)."""
    layers = attention_paths(trace.graph.program)
    if not layers:
        raise ConfigError("this model has no attention node")
    if isinstance(layer, str):
        if layer not in layers:
            trace[layer]  # an unknown path: the near matches
            raise ConfigError(f"{layer} is no attention node; the attention nodes are {', '.join(layers)}")
        name = layer
    elif isinstance(layer, (int, np.integer)) and not isinstance(layer, bool) and -len(layers) <= layer < len(layers):
        name = layers[layer]
    else:
        raise ConfigError(f"layer {layer!r} is not one of the {len(layers)} attention nodes (0 .. {len(layers) - 1}, "
                          f"or a path: {', '.join(layers[:3])}, ...)")
    return node_paths(trace.graph.program)[name][0]


def head_weights(trace, layer, head: int) -> np.ndarray:
    """(N, N) float weights of head `head` of attention node `layer` over the trace's N positions; a position
    attends only inside its own window, so the matrix is block-diagonal by window."""
    graph = trace.graph
    index = attention_node(trace, layer)
    node, kernel = graph.program.nodes[index], graph.passes.kernels[index]
    heads = head_columns(kernel)
    if isinstance(head, bool) or not isinstance(head, (int, np.integer)) or not 0 <= head < len(heads):
        raise ConfigError(f"head {head!r}: {node.name} has heads 0 .. {len(heads) - 1}")
    column, width = heads[head]
    one = HeadGroup(column, 1, width)
    be, n = graph.be, len(trace.ids)
    weights = np.zeros((n, n), dtype=np.float64)
    for span in trace.spans:
        batch, seq_len = span.run.batch, span.run.seq_len
        rows = slice(span.first, span.first + span.rows)
        q, k = (split_heads(be.from_host(trace.values[node.inputs[port][0]][rows]), one) for port in ("q", "k"))
        if kernel.rope is not None:
            cos, sin = kernel.rope.tables(width, seq_len)
            be.rope_apply(q, cos, sin)
            be.rope_apply(k, cos, sin)
        queries, keys = (a.reshape(batch, seq_len, width) for a in (q, k))
        _, saved = be.masked_attention(queries, keys, keys, 1.0 / math.sqrt(width),
                                       hidden_mask(kernel.mask, kernel.gap, seq_len))
        probs = be.to_host(saved[3]).reshape(batch, seq_len, seq_len)
        for b in range(batch):
            start = span.first + b * seq_len
            weights[start : start + seq_len, start : start + seq_len] = probs[b]
    return weights
