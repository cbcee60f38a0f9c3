"""A graph's incremental decoding with a key/value cache, where the graph allows it: `cacheable(program)` and
`GraphDecoder`, with the face of every decoder (model/decode.py's `CachedDecoder`: `prefill`, `step`, `consumed`).

A cache is sound when the path to the logits mixes positions only through attention under the causal mask
(`attention`, or `rope_attention` where the compiler folded RoPE into it) and stand-alone `rope`, and every
other node on it is position-wise (`Op.cross_position`): then the keys and values an attention node saw for
a position never change when later tokens arrive, and RoPE needs only each row's position (`PassContext.start`).
Any other op there (a prefix mean, a prior, an anticausal mask) makes `GraphModel.decoder()` an exact
rerun (model/decode.py's `Rerun`) instead. Nodes off that path (the lookahead heads, the losses) never run.

The decoder keeps, for every attention node on the path and every head group of it, a `KVRing`
(model/kv_cache.py) of seq_len slots: position p in slot p % seq_len, so past seq_len the cache slides
(sliding-window attention at every attention node), as gpt's does. The nodes run their own kernels (the
training forward), the attention kernels through `run.caches[kernel][group].attend(...)`.

Only the last new row's logits are wanted. The position-wise nodes after the last part of the graph that
mixes positions run on that row alone: the top-level nodes on the logits path that no cross-position node
reads after and that lie in no top-level group holding one (gpt's final norm and head, which its decoder
runs on the last row too, so that a graph written like gpt decodes bit for bit as gpt does).
"""

from __future__ import annotations

import numpy as np

from microgpt.backends.base import Mat
from microgpt.model.decode import CachedDecoder
from microgpt.model.graph.program import Program
from microgpt.model.kv_cache import KVRing

CACHED_OPS = ("attention", "rope_attention")  # cross-position ops a KV ring can hold, under the causal mask
POSITIONAL_OPS = ("rope",)  # cross-position ops that read only each row's position


def blocker(program: Program):
    """The first node on the path to the logits that a KV cache cannot serve (None: the graph can be cached)."""
    for i in program.needed([program.logits]):
        node = program.nodes[i]
        op = node.op
        if not op.cross_position or op.name in POSITIONAL_OPS:
            continue
        if op.name in CACHED_OPS and op.cacheable(node):
            continue
        return node
    return None


def cacheable(program: Program) -> bool:
    """Whether the graph's logits can be decoded through KV caches (the module's conditions)."""
    return blocker(program) is None


def last_row_nodes(program: Program, order: list[int]) -> set[int]:
    """The nodes among `order` (the path to the logits, forward order) that need only the last new row: each
    position-wise, read (through any chain) by no cross-position node, and in no top-level group holding one."""
    mixing_units = {node.path[0] for node in (program.nodes[i] for i in order) if node.op.cross_position}
    readers: dict[int, list[int]] = {}  # value id -> the nodes of order reading it
    for i in order:
        for vid in program.nodes[i].input_ids():
            readers.setdefault(vid, []).append(i)
    feeds_mixing: set[int] = set()  # nodes whose outputs reach a cross-position node
    for i in reversed(order):
        node = program.nodes[i]
        later = [j for vid in node.outputs.values() for j in readers.get(vid, [])]
        if any(program.nodes[j].op.cross_position or j in feeds_mixing for j in later):
            feeds_mixing.add(i)
    return {i for i in order if not program.nodes[i].op.cross_position and i not in feeds_mixing
            and program.nodes[i].path[0] not in mixing_units}


class GraphDecoder(CachedDecoder):
    """Per attention node and head group, K/V rings of seq_len slots for one sequence."""

    def __init__(self, model):
        program, passes = model.program, model.passes
        super().__init__(program.dims["T"])
        self.model, self.passes, self.program = model, passes, program
        self.order = program.needed([program.logits])  # forward order of the nodes the logits need
        self.last_row = last_row_nodes(program, self.order)
        self.rings = {passes.kernels[i]: [KVRing(model.be, g, self.capacity) for g in passes.kernels[i].groups]
                      for i in self.order if program.nodes[i].op.name in CACHED_OPS}  # kernel -> [group] rings

    def _forward(self, token_ids: np.ndarray, start: int) -> Mat:
        """Run n new tokens (positions start .. start + n - 1) through the path to the logits, each
        attention node reading and extending its rings; logits (1, vocab) of the last of them."""
        be, program, nodes = self.model.be, self.program, self.program.nodes
        n = len(token_ids)
        ids_host = token_ids[None, :]  # (1, n)
        every_row, last_row = self.passes.run_for(ids_host), self.passes.run_for(ids_host[:, -1:])
        every_row.start, last_row.start = start, start + n - 1
        every_row.caches = last_row.caches = self.rings
        values = {program.tokens: be.ids(token_ids)}  # value id -> backend array of n rows (or 1, for last_row)
        rows = {program.tokens: n}  # value id -> the rows it holds
        uses: dict[int, int] = {}
        for i in self.order:
            for vid in nodes[i].input_ids():
                uses[vid] = uses.get(vid, 0) + 1
        for i in self.order:
            node, alone = nodes[i], i in self.last_row
            inputs = [values[vid][n - 1 :] if alone and rows[vid] == n else values[vid]
                      for vid in node.input_ids()]  # the last row alone ((1, width), or (1,) ids) where wanted
            outputs, _ = self.passes.kernels[i].forward(inputs, last_row if alone else every_row)
            for vid, value in zip(node.outputs.values(), outputs):
                values[vid], rows[vid] = value, 1 if alone else n
            for vid in node.input_ids():
                uses[vid] -= 1
                if uses[vid] == 0 and vid != program.logits:
                    del values[vid]
        logits = values[program.logits]  # (rows, vocab)
        return logits[-1:]  # (1, vocab)
