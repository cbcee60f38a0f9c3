"""A compiled graph as a model: its parameters, and forward and backward node by node.

`Passes` binds every node's kernel to one set of parameter views (so that the trainer can run each thread's
slice of a batch on its own, model/thread_split.py, as for every family). Forward runs the nodes in order, keeping each value until its
last reader has run; backward runs them in reverse, handing each node the gradient of its outputs: where a
value was read several times, the sum of its readers' gradients, added in the readers' forward order, the
readers inside one group instance summed first (as a hand-written module returns one gradient of its input),
so that a graph written like a family sums them as the family does, bit for bit. A node whose outputs get no
gradient (nothing after it reaches a loss) is skipped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from microgpt.model.decode import Rerun
from microgpt.model.graph.decode import GraphDecoder, cacheable
from microgpt.model.graph.program import Program
from microgpt.model.heads import HeadLogits
from microgpt.model.params import Parameters, ParameterViews
from microgpt.model.rope import RopeTables


@dataclass
class PassContext:
    """What a pass's kernels read besides their inputs: the batch's shape and host ids, the targets, the step."""

    batch: int
    seq_len: int
    ids_host: np.ndarray  # (B, T)
    windows: object = None  # backend (B, T+1) ids, for the losses' targets; None outside training
    step: int = 0  # optimiser steps taken
    start: int = 0  # the position of the first row (decoding)
    caches: dict | None = None  # kernel -> its KV rings, while decoding
    losses: dict = field(default_factory=dict)  # loss kernel -> its mean loss

    @property
    def rows(self) -> int:
        return self.batch * self.seq_len

    def targets(self, offset: int, counted: int):
        """Device ids (B*counted,): the token offset after each of the first `counted` positions."""
        return self.windows[:, offset : offset + counted].reshape(-1)


@dataclass
class Shared:
    """What every kernel of one model shares: the RoPE tables, the tokenizer, the optimiser's step."""

    rope: RopeTables
    tokenizer: object
    step_of: object  # () -> optimiser steps taken


class Passes:
    """The program's kernels over one set of parameter views, and the passes through them."""

    def __init__(self, program: Program, backend, views: ParameterViews, shared: Shared):
        self.program, self.be, self.shared = program, backend, shared
        self.kernels = [node.op.kernel(node, backend, views, shared) for node in program.nodes]
        self.everything = list(range(len(program.nodes)))
        self.to_logits = program.needed([program.logits])
        self.to_main_loss = program.needed_for_node(program.main_loss)

    def check_ids(self, ids: np.ndarray) -> tuple[int, int]:
        seq_len = self.program.dims["T"]
        if ids.ndim != 2:
            raise ValueError(f"token ids must be (batch, seq_len), got shape {ids.shape}")
        if not 1 <= ids.shape[1] <= seq_len:
            raise ValueError(f"sequence length {ids.shape[1]} is outside 1..{seq_len} (the model's seq_len)")
        return ids.shape

    def run_for(self, ids_host: np.ndarray, windows=None) -> PassContext:
        batch, seq_len = self.check_ids(ids_host)
        return PassContext(batch, seq_len, ids_host, windows, self.shared.step_of())

    def forward(self, run: PassContext, order: list[int], keep: Iterable[int] = (), save: bool = False,
                watch: Callable | None = None) -> tuple[dict, list]:
        """(the values of `keep`, each node's saved when `save`: what backward needs) after running the nodes
        `order` (forward order); `watch(value id, value)` is shown every value as it is made."""
        nodes, values = self.program.nodes, {self.program.tokens: self.be.ids(run.ids_host.reshape(-1))}
        keep = set(keep)
        uses: dict[int, int] = {}
        for i in order:
            for vid in nodes[i].input_ids():
                uses[vid] = uses.get(vid, 0) + 1
        saved: list = [None] * len(nodes)
        for i in order:
            node = nodes[i]
            outputs, kept = self.kernels[i].forward([values[v] for v in node.input_ids()], run)
            saved[i] = kept if save else None
            values.update(zip(node.outputs.values(), outputs))
            if watch is not None:
                for vid, value in zip(node.outputs.values(), outputs):
                    watch(vid, value)
            for vid in node.input_ids():
                uses[vid] -= 1
                if uses[vid] == 0 and vid not in keep:
                    del values[vid]  # its last reader has run: what backward needs, the readers saved
        return {vid: values[vid] for vid in keep}, saved

    def backward(self, run: PassContext, order: list[int], saved: list) -> None:
        """Every parameter gradient, from the losses among `order` back."""
        be, nodes = self.be, self.program.nodes
        grads: dict[int, list] = {}  # value id -> [(reader index, its gradient)]
        for i in reversed(order):
            node = nodes[i]
            douts = [_in_order(be, grads.pop(vid, []), nodes) for vid in node.outputs.values()]
            if douts and all(d is None for d in douts):
                continue  # nothing after this node reaches a loss
            dins = self.kernels[i].backward(douts, saved[i], run)
            saved[i] = None
            for vid, dx in zip(node.input_ids(), dins):
                if dx is not None:
                    grads.setdefault(vid, []).append((i, dx))

    def upload(self, windows: np.ndarray) -> PassContext:
        windows = np.asarray(windows)
        run = self.run_for(windows[:, :-1], self.be.ids(windows))  # (B, T), (B, T+1)
        return run

    def loss(self, windows: np.ndarray) -> float:
        """The main loss of windows (B, T+1), forward only."""
        run = self.upload(windows)
        self.forward(run, self.to_main_loss)
        return run.losses[self.kernels[self.program.main_loss]]

    def loss_and_backward(self, windows: np.ndarray):
        """(the main loss, the other losses by name) of windows (B, T+1); adds every gradient of the objective
        into these views' buffers."""
        run = self.upload(windows)
        _, saved = self.forward(run, self.everything, save=True)
        self.backward(run, self.everything, saved)
        main = run.losses[self.kernels[self.program.main_loss]]
        others = {self.program.metric_name(i): run.losses[self.kernels[i]] for i in self.program.losses[1:]}
        if not others:
            return main, others
        objective = sum(run.losses.values())  # each loss's weight scales its gradient; the check is finiteness
        return (main if math.isfinite(objective) else objective), others

    def logits(self, ids_host: np.ndarray):
        """Backend logits (B*T, vocab) of the graph's logits output for host ids (B, T)."""
        run = self.run_for(ids_host)
        values, _ = self.forward(run, self.to_logits, keep=(self.program.logits,))
        return values[self.program.logits]

    def heads(self, ids_host: np.ndarray) -> list[HeadLogits]:
        """The logits every loss reads: the main output's, then each other loss's (its offset; it must not see
        its target)."""
        run = self.run_for(ids_host)
        losses = self.program.losses
        inputs = [self.program.nodes[i].inputs["logits"][0] for i in losses]
        order = self.program.needed(inputs)
        values, _ = self.forward(run, order, keep=tuple(dict.fromkeys(inputs)))
        found = [HeadLogits("main", 1, (1, None), values[inputs[0]])]
        for i, vid in zip(losses[1:], inputs[1:]):
            offset = self.program.nodes[i].params["offset"]
            found.append(HeadLogits(self.program.nodes[i].where, offset, (offset, offset), values[vid]))
        return found


def _in_order(be, contributions: list, nodes: list):
    """The sum of the gradients a value's readers gave it (None for none): in the readers' forward order, where
    the readers inside one group instance (below the readers' common path) are summed first, recursively, and
    that sum is added in place of them: the trunk's state read by a lookahead head's two block inputs gets
    main + (ln1 + add1), as the family's head.backward returns one gradient."""
    if not contributions:
        return None
    contributions.sort(key=lambda pair: pair[0])
    return _tree_sum(be, contributions, nodes)


def _tree_sum(be, contributions: list, nodes: list):
    """The sum of (reader index, gradient) pairs in reader order, each group instance's readers summed first."""
    if len(contributions) == 1:
        return contributions[0][1]
    paths = [nodes[i].path for i, _ in contributions]
    depth = 0
    while all(len(p) > depth for p in paths) and len({p[depth] for p in paths}) == 1:
        depth += 1  # the readers' common path: the innermost instance holding all of them
    parts: dict = {}  # the next path component below it (or the reader itself) -> its pairs, in reader order
    for (i, dx), path in zip(contributions, paths):
        parts.setdefault(path[depth] if len(path) > depth + 1 else ("node", i), []).append((i, dx))
    if len(parts) == 1:  # one reader, reading the value on several ports: its gradients in port order
        terms = [dx for _, dx in contributions]
    else:
        terms = [_tree_sum(be, pairs, nodes) for pairs in parts.values()]
    total = be.add(terms[0], terms[1])
    for dx in terms[2:]:
        be.add_(total, dx)
    return total


class GraphModel:
    """A graph's model: one flat parameter store and its passes over it."""

    def __init__(self, config, program: Program, backend, tokenizer, seed: int):
        self.config, self.program, self.be = config, program, backend
        self.params = Parameters(backend, program.specs)
        self.params.initialize(seed)
        self.shared = Shared(RopeTables(backend, config.seq_len), tokenizer, lambda: self.params.step)
        self.passes = self.with_gradients(self.params)  # the passes adding into params.grad

    def with_gradients(self, views: ParameterViews) -> Passes:
        """The graph's passes over the same weights, adding their gradients into views.gradient (a thread's slice
        of a batch, model/thread_split.py)."""
        return Passes(self.program, self.be, views, self.shared)

    @property
    def n_params(self) -> int:
        return self.params.total

    def learn_from(self, tokens: np.ndarray) -> None:
        """Count each bigram or trigram prior's table from the training tokens (a new model, before it trains)."""
        from microgpt.model.graph.ops.ensemble import ngram_tables

        for name, table in ngram_tables(self.program, tokens).items():
            self.params.value[name][...] = self.be.from_host(table)

    def loss(self, windows) -> float:
        return self.passes.loss(windows)

    def loss_and_backward(self, windows):
        return self.passes.loss_and_backward(windows)

    def logits(self, ids):
        return self.passes.logits(np.asarray(ids))

    def heads(self, ids) -> list[HeadLogits]:
        return self.passes.heads(np.asarray(ids))

    def decoder(self):
        """A KV-cached decoder for one sequence where the graph allows one (decode.py), else an exact rerun."""
        return GraphDecoder(self) if cacheable(self.program) else Rerun(self)
