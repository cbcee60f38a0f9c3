"""Random valid graphs of the primitives (hypothesis), compiled and gradient-checked in float64.

`graphs()` draws a document: one or two embeddings, then a few ops each reading earlier values (linears with
and without bias, layer_norm, relu after a linear with bias (which the compiler fuses) or alone, gelu, add of
2-3 inputs, mul, scale, narrow, concat, split, prefix_mean, and attention over random head widths with or
without rope on its queries and keys, the rope folded into it or not), so the graphs are chains and DAGs with
fan-outs and branches that reach no loss; then logits on a concat of the last value and a few others, the
next-token loss, and sometimes a second loss, offset 2 and weight 0.5, on logits of any value. Every mask
is causal, so each graph passes the family's causality check (it runs on each build) and the check is held
on graphs nobody wrote. Each is then checked as test_graph_ops.py checks a case (graph_gradcheck.py: the
tolerances and their reasons).

Derandomized, without the example database, so every run draws the same graphs.
"""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graph_gradcheck import build, check_gradients, perturb, random_windows
from microgpt.backends import get_backend

CHARS = "abcde"  # the char tokenizer's alphabet
VOCAB = len(CHARS)
MAX_WIDTH = 6


class Drafting:
    """A document being drawn: its nodes, its edges, and the stream values so far as (source, width)."""

    def __init__(self, draw):
        self.draw, self.nodes, self.wires, self.streams, self.count = draw, [], [], [], 0

    def node(self, op: str, sources: list[tuple[str, str]], **params) -> str:
        """Add a node of `op` reading each (source, port); its id."""
        self.count += 1
        node_id = f"{op}{self.count}"
        self.nodes.append({"id": node_id, "op": op, "params": params} if params else {"id": node_id, "op": op})
        self.wires += [{"from": source, "to": f"{node_id}.{port}"} for source, port in sources]
        return node_id

    def stream(self, source: str, width: int) -> tuple[str, int]:
        self.streams.append((source, width))
        return source, width

    def pick(self, width: int | None = None) -> tuple[str, int]:
        choices = [s for s in self.streams if width is None or s[1] == width]
        return self.draw(st.sampled_from(choices))

    def width(self, low: int = 1) -> int:
        return self.draw(st.integers(low, MAX_WIDTH))

    def partition(self, total: int, most: int = 3) -> list[int]:
        """Widths >= 1 summing to `total`, at most `most` of them."""
        cuts = [] if total == 1 else self.draw(st.lists(st.integers(1, total - 1), max_size=min(most - 1, total - 1),
                                                         unique=True))
        edges = [0, *sorted(cuts), total]
        return [b - a for a, b in itertools.pairwise(edges)]


def linear(g: Drafting, source: str, out: int, bias: bool) -> str:
    return g.node("linear", [(source, "x")], out=out, bias=bias) + ".out"


def add_attention(g: Drafting) -> None:
    x, _ = g.pick()
    width = g.width(2)
    heads = g.partition(width)
    q, k, v = (linear(g, x, width, g.draw(st.booleans())) for _ in range(3))
    rope = g.draw(st.sampled_from(["none", "folded", "other_heads", "read_twice"]))
    if rope != "none":
        rope_heads = heads if rope != "other_heads" else g.partition(width)
        q = g.node("rope", [(q, "x")], heads=rope_heads) + ".out"
        k = g.node("rope", [(k, "x")], heads=rope_heads) + ".out"
        if rope == "read_twice":
            g.stream(q, width)  # a later node may read the rotated queries too: the rope is not folded
    att = g.node("attention", [(q, "q"), (k, "k"), (v, "v")], heads=heads)
    g.stream(att + ".out", width)


def add_op(g: Drafting, op: str) -> None:
    if op == "linear":
        x, _ = g.pick()
        width = g.width()
        g.stream(linear(g, x, width, g.draw(st.booleans())), width)
    elif op == "linear_relu":  # a linear with bias and a relu: fused unless another node reads the linear
        x, _ = g.pick()
        width = g.width()
        hidden = linear(g, x, width, True)
        if g.draw(st.booleans()):
            g.stream(hidden, width)
        g.stream(g.node("relu", [(hidden, "x")]) + ".out", width)
    elif op in ("layer_norm", "relu", "gelu", "prefix_mean"):
        x, width = g.pick()
        g.stream(g.node(op, [(x, "x")]) + ".out", width)
    elif op == "scale":
        x, width = g.pick()
        g.stream(g.node("scale", [(x, "x")], by=g.draw(st.sampled_from([0.5, -1.5, 2.0]))) + ".out", width)
    elif op == "narrow":
        x, width = g.pick()
        g.stream(g.node("narrow", [(x, "x")], keep=g.draw(st.integers(1, width))) + ".out", width)
    elif op == "add":
        first, width = g.pick()
        others = [g.pick(width)[0] for _ in range(g.draw(st.integers(1, 2)))]  # may repeat a value
        g.stream(g.node("add", [(s, "in") for s in [first, *others]]) + ".out", width)
    elif op == "mul":
        a, width = g.pick()
        g.stream(g.node("mul", [(a, "a"), (g.pick(width)[0], "b")]) + ".out", width)
    elif op == "concat":
        parts = [g.pick() for _ in range(g.draw(st.integers(2, 3)))]
        g.stream(g.node("concat", [(s, "in") for s, _ in parts]) + ".out", sum(w for _, w in parts))
    elif op == "split":
        wide = [s for s in g.streams if s[1] >= 2]
        if not wide:
            return
        x, width = g.draw(st.sampled_from(wide))
        widths = g.partition(width)
        if len(widths) < 2:
            widths = [1, width - 1]
        cut = g.node("split", [(x, "x")], widths=widths)
        for i, w in enumerate(widths):
            g.stream(f"{cut}.out{i}", w)
    elif op == "attention":
        add_attention(g)


OPS = ["linear", "linear_relu", "layer_norm", "relu", "gelu", "prefix_mean", "scale", "narrow", "add", "mul",
       "concat", "split", "attention"]


@st.composite
def graphs(draw) -> tuple[dict, int]:
    """(document, seq_len) of a random valid graph."""
    g = Drafting(draw)
    for _ in range(draw(st.integers(1, 2))):
        width = g.width()
        g.stream(g.node("embedding", [("tokens", "ids")], width=width) + ".out", width)
    for op in draw(st.lists(st.sampled_from(OPS), min_size=2, max_size=6)):
        add_op(g, op)
    last = g.streams[-1][0]
    extra = draw(st.lists(st.sampled_from(g.streams), max_size=2))
    features = last if not extra else g.node("concat", [(s, "in") for s in [last, *(s for s, _ in extra)]]) + ".out"
    head = g.node("logits", [(features, "x")], bias=draw(st.booleans()))
    g.node("cross_entropy", [(head + ".out", "logits")])
    g.wires.append({"from": head + ".out", "to": "logits"})
    if draw(st.booleans()):
        side = g.node("logits", [(g.pick()[0], "x")])
        g.node("cross_entropy", [(side + ".out", "logits")], offset=2, weight=0.5)
    document = {"microgpt_graph": 1, "nodes": g.nodes, "edges": g.wires}
    return document, draw(st.sampled_from([3, 5, 7]))


@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(graphs(), st.integers(0, 2**16))
def test_random_graphs_have_the_gradients_of_their_objective(drawn, seed):
    """Tolerances: graph_gradcheck's ATOL/RTOL (float64, step 1e-6; see its docstring)."""
    document, seq_len = drawn
    model = build(document, seq_len, CHARS, get_backend("numpy", dtype=np.float64), seed)
    perturb(model, seed)
    # a parameter whose gradient is all 0 is one that reaches no loss (a dead branch), or a key bias without
    # rope (it shifts a softmax row by a constant); its sampled differences are held to ~0 all the same
    check_gradients(model, random_windows(VOCAB, seq_len, 2, seed), seed, per_parameter=3,
                    structural_zero=lambda name: True)
