"""What one training step of a graph holds, counted from its program before anything is allocated.

In elements of the backend's dtype, for N = batch x T rows:
- kept from forward to backward: every value some reader saves for its backward (a linear's input, a mul's
  two inputs, a gelu's), counted once however many readers save it, plus what each op saves of its own
  (`private`): a LayerNorm's normalised input and 1/std, a relu's mask (and at bf16 on the cpu and cuda
  backends the bits beside their outputs, `Backend.rounded_memory`), an attention's per-head copies of q,
  k and v and what the backend's attention keeps, a loss's gradient of its logits;
- the most held on top of that at any moment: at the end of forward a loss's logits beside the gradient it
  keeps (N x vocab); in backward the gradients waiting for their producers and the temporary of the
  node running (an attention's, as the backend reports it, and a few N x width; a linear's input gradient),
  less what the nodes already run have freed.
model/memory.py adds the parameter state and the optimiser step; tests/graph/test_graph_memory.py holds the sum to
the measured peak.
"""

from __future__ import annotations

import numpy as np

from microgpt.model.attention import head_groups
from microgpt.model.graph.ops.attention import head_widths
from microgpt.model.graph.program import Program

SAVES_INPUTS = {"linear", "logits", "stream_read", "stream_write", "linear_relu", "mul", "gelu"}
SAVES_NOTHING = {"embedding", "layer_norm", "relu", "add", "scale", "concat", "split", "narrow", "rope",
                 "attention", "rope_attention", "prefix_mean", "cross_entropy"}


def _width(program: Program, vid: int) -> int:
    return program.values[vid].width or 0


def _private(program: Program, node, rows: int, batch: int, backend) -> tuple[int, int]:
    """(elements the op keeps of its own until backward, its largest temporary), for one node."""
    name, T = node.op.name, program.dims["T"]
    out = sum(_width(program, vid) for vid in node.outputs.values())
    if name == "layer_norm":  # and at bf16 on the cpu and cuda backends, its output's bits (as relu's)
        return rows * out + rows + backend.rounded_memory(rows * out), rows * out
    if name in ("relu", "linear_relu"):
        return rows * out + backend.rounded_memory(rows * out), rows * out
    if name == "gelu":
        return rows * out, 2 * rows * out
    if name in ("attention", "rope_attention"):
        width = _width(program, node.inputs["q"][0])
        kept, temporary = 3 * rows * width, 0
        for group in head_groups(head_widths(node.params, width)):
            group_kept, group_temporary = backend.attention_memory(batch * group.count, T, group.width)
            kept += group_kept
            temporary = max(temporary, group_temporary)
        # two thirds of the backend's figure, which is for a family holding every layer through its backward:
        # here the temporaries of an attention backward overlap less (benchmarks/bench_graph.py holds the
        # estimate against the numpy peak; its figures are in docs/benchmarks.md)
        return kept, 2 * temporary // 3 + 6 * rows * width
    if name == "cross_entropy":  # its temporaries come in forward (program_parts counts them there)
        return rows * program.dims["vocab"], 0
    if name in SAVES_NOTHING or name in SAVES_INPUTS:
        return 0, rows * max([out, *(_width(program, v) for v in node.input_ids())])
    return rows * out, 2 * rows * out  # an op that does not say: its output again, and twice that at a time


# "last": (program, backend, rows, batch, _kept's answer): the studio's check asks twice (node_activations
# for each node's costs, program_parts for the step's memory)
_last_kept: dict = {}


def _kept(program: Program, rows: int, batch: int, backend) -> tuple[dict[int, int], list[int], list[int]]:
    """(value -> the first node in forward order that saves it, so the last backward to hold it; what each node
    keeps of its own; each node's largest temporary), in elements; the last program's kept (read, never
    changed), stored as one item since checks run on threads."""
    last = _last_kept.get("last")
    if last is not None and last[0] is program and last[1] is backend and last[2:4] == (rows, batch):
        return last[4]
    kept = _count_kept(program, rows, batch, backend)
    _last_kept["last"] = (program, backend, rows, batch, kept)
    return kept


def _count_kept(program: Program, rows: int, batch: int, backend) -> tuple[dict[int, int], list[int], list[int]]:
    savers: dict[int, int] = {}
    private, temporary = [], []
    for i, node in enumerate(program.nodes):
        if node.op.name not in SAVES_NOTHING:
            for vid in node.input_ids():
                if vid != program.tokens:
                    savers.setdefault(vid, i)
        own, temp = _private(program, node, rows, batch, backend)
        private.append(own)
        temporary.append(temp)
    return savers, private, temporary


def node_activations(program: Program, batch: int, backend) -> list[int]:
    """Bytes each node of the program keeps from forward to backward: its own saved state, and the outputs it
    makes that a reader saves (counted once, at their producer). They add up to program_parts' activations."""
    rows = batch * program.dims["T"]
    savers, private, _ = _kept(program, rows, batch, backend)
    element = np.dtype(backend.dtype).itemsize
    return [(own + sum(rows * _width(program, vid) for vid in node.outputs.values() if vid in savers)) * element
            for own, node in zip(private, program.nodes)]


def program_parts(program: Program, batch: int, backend) -> dict[str, int]:
    """{"activations": bytes kept from forward to backward, "workspace": the most that backward holds on top
    of what is still kept at any moment}, walking the backward as model.py runs it: a node's own saved state
    and the values only it still saves go when its backward is done; a gradient lives from the reader that
    makes it to the producer that takes it."""
    rows = batch * program.dims["T"]
    savers, private, temporary = _kept(program, rows, batch, backend)
    kept = sum(private) + sum(rows * _width(program, vid) for vid in savers)
    workspace = rows * program.dims["vocab"]  # the end of forward: a loss's logits, beside its kept gradient
    freed = [0] * len(program.nodes)  # elements of the saved values whose last holder is each node
    for vid, first in savers.items():
        freed[first] += rows * _width(program, vid)
    live, pending = kept, {}  # pending: value -> elements of the gradients waiting for it
    for i in reversed(range(len(program.nodes))):
        node = program.nodes[i]
        waiting = sum(pending.values())
        workspace = max(workspace, live - kept + waiting + temporary[i])
        for vid in node.outputs.values():
            pending.pop(vid, None)
        live -= private[i] + freed[i]
        for vid in node.input_ids():
            if vid != program.tokens:
                pending[vid] = pending.get(vid, 0) + rows * _width(program, vid)
    element = np.dtype(backend.dtype).itemsize
    return {"activations": kept * element, "workspace": workspace * element}
