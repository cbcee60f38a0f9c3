"""The ensemble's primitives: the empty stream, the priors, the router and the router-weighted mix.

- `zeros`: a stream of zeros [T, width], the shared stream before anything writes into it;
- `prior`: an algorithmic signal from the token ids, by `kind`:
  `bigram` and `trigram` give the row of a next-token table [T, vocab] (a non-trainable parameter counted
  from the training tokens, `ngram_tables`), `calculator` the one-hot of the next character of `X + Y = Z`
  [T, vocab] (uniform where it has no opinion; it needs the char tokenizer), `counter` a learned
  per-position signal [T, width]. A table or a calculator's features go through a separate linear node to
  wherever they are written (the ensemble's stream, or a GPT's logits through a `logits` node); the
  counter's signal is itself the write. From the optimiser step `until_step` on (--prior-off-at) every
  kind gives zeros, decided as the ensemble family's `prior_on()` decides it;
- `router`: per position, the weights [T, experts] that mix the experts' logits, from a causal feature
  (`global`: the mean of the stream so far; `context`: a running sum of its own token embeddings;
  `gated`: the same with a learned reset), z = f @ w + b, weights (1 - epsilon) softmax(z) + epsilon / n;
- `mix`: sum_k weights[:, k] * logits_k; backward gives expert k's logits dmixed / n (`equal`, the
  family's rule against collapse) or weights[:, k] * dmixed (`routed`, the true gradient), and the weights
  their true gradient, <dmixed, logits_k> per row.

The prior's features and the router are the shared parts the ensemble family calls too (model/priors.py,
model/router.py), so a graph written like the family trains like it.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from microgpt.core.errors import ConfigError
from microgpt.model.graph.ops.base import (
    REQUIRED,
    Kernel,
    Op,
    Port,
    ValueType,
    expect,
    number_param,
    whole_param,
)
from microgpt.model.params import ParamSpec
from microgpt.model.priors import (
    MAX_TRIGRAM_ENTRIES,
    check_calculator_tokenizer,
    ngram_table,
    window_features,
)
from microgpt.model.router import KINDS as ROUTER_KINDS
from microgpt.model.router import Router, router_specs

PRIOR_KINDS = ("counter", "bigram", "trigram", "calculator")
TABLE_KINDS = ("bigram", "trigram")
MIX_GRADS = ("equal", "routed")
NEVER = "never"  # a prior's until_step that never switches it off (as null does)
COUNTER_STD = 0.02  # the counter's signal ~ N(0, 0.02^2), the family's


def _word(params: dict, key: str, allowed: tuple[str, ...]) -> str:
    if params[key] not in allowed:
        raise ConfigError(f"param {key} must be one of {', '.join(allowed)}, got {params[key]!r}")
    return params[key]


# ---- zeros ---------------------------------------------------------------------------------------


class ZerosKernel(Kernel):
    def __init__(self, backend, width: int):
        self.be, self.width = backend, width

    def forward(self, inputs, run):
        return [self.be.zeros((run.rows, self.width))], None  # (rows, width)

    def backward(self, douts, saved, run):
        return []


class ZerosOp(Op):
    name = "zeros"
    doc = "a stream of zeros [T, width]: the shared stream before anything writes into it"
    params: ClassVar[dict] = {"width": "stream_dim"}

    def infer(self, node):
        return {"out": ValueType("stream", whole_param(node.params, "width"))}

    def kernel(self, node, backend, views, shared):
        return ZerosKernel(backend, node.params["width"])


# ---- prior ---------------------------------------------------------------------------------------


def until_step(params: dict) -> int | None:
    """The optimiser step from which a prior gives zeros (None: never), from its `until_step` param."""
    value = params["until_step"]
    if value is None or value == NEVER:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"param until_step must be a step of at least 1, or {NEVER} (or null), got {value!r}")
    return value


class PriorKernel(Kernel):
    def __init__(self, node, backend, views, shared):
        self.be, self.kind, self.until = backend, node.params["kind"], until_step(node.params)
        self.vocab, self.width = node.dims["vocab"], node.types["out"].width
        self.table = views.value.get(node.name)  # the counter's signal, or an n-gram table
        self.dtable = views.gradient.get(node.name)
        self.ids_of = None
        if self.kind == "calculator":
            if shared.tokenizer is None:
                raise ConfigError("prior calculator reads characters; train it with --tokenizer char")
            self.ids_of = check_calculator_tokenizer(shared.tokenizer)

    def on(self, run) -> bool:
        """Whether the prior gives its signal: in training step s (s - 1 steps done) while s < until_step;
        after training, as the next step would (the ensemble family's prior_on)."""
        return self.until is None or run.step + 1 < self.until

    def forward(self, inputs, run):
        be, (ids,) = self.be, inputs
        if not self.on(run):
            return [be.zeros((run.rows, self.width))], None  # (rows, width): switched off
        batch, seq_len = run.batch, run.seq_len
        if self.kind == "counter":
            positions = be.ids(np.tile(np.arange(run.start, run.start + seq_len, dtype=np.int32), batch))  # (B*T,)
            return [be.embedding_gather(self.table, positions, run.rows, self.width)], positions  # (B*T, width)
        features = window_features(be, self.kind, self.table, ids, np.asarray(run.ids_host), self.vocab,
                                   self.ids_of)  # (B*T, vocab)
        return [features], None

    def backward(self, douts, positions, run):
        if positions is not None:  # the counter, switched on: its signal is learned
            self.be.embedding_scatter_add(douts[0], positions, self.dtable, run.rows, self.width)
        return [None]


class PriorOp(Op):
    name = "prior"
    doc = ("an algorithmic signal from the tokens: kind bigram or trigram (the row of a next-token table counted "
           "from the training text, [T, vocab]), calculator (the next character of X + Y = Z, [T, vocab]), counter "
           "(a learned per-position signal, [T, width]); zeros from step until_step on")
    inputs: ClassVar[dict] = {"ids": Port("token_ids")}
    params: ClassVar[dict] = {"kind": REQUIRED, "until_step": None, "width": None}
    words = frozenset({"kind", "until_step"})
    choices: ClassVar[dict] = {"kind": PRIOR_KINDS}
    cross_position = True  # the trigram reads the token before, the calculator the line so far, the counter t

    def infer(self, node):
        expect("ids", node.in_types["ids"][0], "token_ids")
        kind, vocab = _word(node.params, "kind", PRIOR_KINDS), node.dims["vocab"]
        until_step(node.params)
        if kind != "counter":
            if node.params["width"] is not None:
                raise ConfigError(f"param width is the counter's; prior {kind} is vocab ({vocab}) wide")
            if kind == "trigram" and (vocab + 1) * vocab**2 > MAX_TRIGRAM_ENTRIES:
                raise ConfigError(f"prior trigram counts a table of (V + 1) x V x V = {(vocab + 1) * vocab**2:,} "
                                  f"entries for this vocabulary of {vocab} tokens; use bigram, or the char tokenizer")
            return {"out": ValueType("stream", vocab)}
        if node.params["width"] is None:
            raise ConfigError("prior counter needs the param width (its signal's, the stream's: stream_dim)")
        return {"out": ValueType("stream", whole_param(node.params, "width"))}

    def param_specs(self, node):
        kind, vocab, width = node.params["kind"], node.dims["vocab"], node.types["out"].width
        if kind == "counter":
            return [ParamSpec(node.name, (node.dims["T"], width), COUNTER_STD)]
        rows = {"bigram": vocab, "trigram": (vocab + 1) * vocab}.get(kind)
        if rows is None:
            return []
        return [ParamSpec(node.name, (rows, vocab), 0.0, 1.0 / vocab, trainable=False)]  # counted, never trained

    def kernel(self, node, backend, views, shared):
        return PriorKernel(node, backend, views, shared)


def ngram_tables(program, tokens: np.ndarray) -> dict[str, np.ndarray]:
    """Each bigram or trigram prior's table by parameter name, counted from the training tokens (model/ensemble/
    priors.py's add-one-smoothed `ngram_table`); none for a graph without one."""
    vocab = program.dims["vocab"]
    return {node.name: ngram_table(node.params["kind"], tokens, vocab) for node in program.nodes
            if node.op.name == "prior" and node.params["kind"] in TABLE_KINDS}


# ---- router --------------------------------------------------------------------------------------


class RouterKernel(Kernel):
    """The shared router (model/router.py) between the backend's arrays: weights out, the stream's gradient in."""

    def __init__(self, node, backend, views):
        self.be, self.n = backend, node.params["experts"]
        self.router = Router(backend, views, node.params["kind"], self.n, float(node.params["epsilon"]), node.name)

    def forward(self, inputs, run):
        _, stream = inputs
        weights, saved = self.router.forward(np.asarray(run.ids_host), stream)  # (B*T, n) on the host
        return [self.be.from_host(weights)], saved

    def backward(self, douts, saved, run):
        dweights = self.be.to_host(douts[0]).reshape(-1, self.n)  # (B*T, n)
        dstream = self.router.backward(dweights, saved)  # (B*T, width) for `global`; the others read no stream
        return [None, None if dstream is None else self.be.from_host(dstream)]


class RouterOp(Op):
    name = "router"
    doc = ("the weights [T, experts] that mix experts' logits per position, from the mean of the stream so far "
           "(kind global), a running sum of token embeddings (context) or one with a learned reset (gated); "
           "(1 - epsilon) softmax + epsilon / experts")
    inputs: ClassVar[dict] = {"ids": Port("token_ids"), "stream": Port("stream")}
    outputs = ("weights",)
    params: ClassVar[dict] = {"kind": "global", "experts": REQUIRED, "epsilon": 0.2}
    words = frozenset({"kind"})
    choices: ClassVar[dict] = {"kind": ROUTER_KINDS}
    cross_position = True

    def infer(self, node):
        expect("ids", node.in_types["ids"][0], "token_ids")
        expect("stream", node.in_types["stream"][0], "stream")
        _word(node.params, "kind", ROUTER_KINDS)
        if not 0 <= number_param(node.params, "epsilon") <= 1:
            raise ConfigError(f"param epsilon must be between 0 and 1, got {node.params['epsilon']}")
        return {"weights": ValueType("weights", whole_param(node.params, "experts"))}

    def param_specs(self, node):
        return router_specs(node.params["kind"], node.params["experts"], node.in_types["stream"][0].width,
                            node.dims["vocab"], node.name)

    def kernel(self, node, backend, views, shared):
        return RouterKernel(node, backend, views)


# ---- mix -----------------------------------------------------------------------------------------


class MixKernel(Kernel):
    def __init__(self, backend, routed: bool):
        self.be, self.routed = backend, routed

    def forward(self, inputs, run):
        be, (weights, *expert_logits) = self.be, inputs
        mixed = be.zeros(expert_logits[0].shape)  # (rows, vocab)
        for k, logits in enumerate(expert_logits):
            be.add_(mixed, logits * weights[:, k : k + 1])
        return [mixed], (weights, expert_logits)

    def backward(self, douts, saved, run):
        be, (dmixed,), (weights, expert_logits) = self.be, douts, saved
        n = len(expert_logits)
        dweights = np.stack([np.asarray(be.to_host((dmixed * logits).sum(axis=1))).reshape(-1)
                             for logits in expert_logits], axis=1)  # (rows, n): <dmixed, logits_k> per row
        if self.routed:
            shares = [dmixed * weights[:, k : k + 1] for k in range(n)]  # each (rows, vocab)
        else:
            shares = [dmixed * (1.0 / n)] * n  # (rows, vocab), one array for all: readers never write into it
        return [be.from_host(dweights), *shares]


class MixOp(Op):
    name = "mix"
    doc = ("sum_k weights[:, k] * logits_k over the logits edges in order; grad equal (each expert's logits get "
           "the mixed gradient over n) or routed (times its weight: the true gradient)")
    inputs: ClassVar[dict] = {"weights": Port("weights"), "logits": Port("logits", many=True)}
    params: ClassVar[dict] = {"grad": "equal"}
    words = frozenset({"grad"})
    choices: ClassVar[dict] = {"grad": MIX_GRADS}

    def infer(self, node):
        weights, logits = node.in_types["weights"][0], node.in_types["logits"]
        expect("weights", weights, "weights")
        for got in logits:
            expect("logits", got, "logits", node.dims["vocab"], "vocab")
        if weights.width != len(logits):
            raise ConfigError(f"its weights are over {weights.width} experts and {len(logits)} logits edges come in; "
                              "give the router one expert per logits edge")
        _word(node.params, "grad", MIX_GRADS)
        return {"out": ValueType("logits", node.dims["vocab"])}

    def kernel(self, node, backend, views, shared):
        return MixKernel(backend, node.params["grad"] == "routed")


OPS = [ZerosOp(), PriorOp(), RouterOp(), MixOp()]
