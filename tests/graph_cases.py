"""Tiny graph documents, one per primitive, for the graph family's op tests (test_graph_ops.py).

`OP_CASES` maps every op name of `microgpt.model.graph.ops.ALL` to a function returning a document whose
compiled program runs that op; the compiler-made ops (`linear_relu`, `rope_attention`) get graphs that the
compiler fuses, and their unfused forms get cases of their own (`relu`, `rope`, `attention`). `VARIANT_CASES`
holds the other shapes worth a check (masks, fan-outs, the fusion rules' exceptions), by a case name;
`UNSOUND_CASES` names those that see the future on purpose (the full and anticausal masks), which the op
tests build past the family's causality check.

A case function returns a document (run at seq_len DEFAULT_SEQ_LEN) or a (document, seq_len) pair. Other
`tests/graph_cases*.py` modules (graph_cases_ensemble.py) give their own OP_CASES (and optionally
VARIANT_CASES, UNSOUND_CASES, PARITY_ONLY_CASES (cases whose backward is not the objective's gradient by
design, such as a mix with grad "equal": checked for cpu/numpy parity, not against differences), and CHARS,
their tokenizer's alphabet where this one's does not fit) in this shape; test_graph_ops.py merges them all
and fails for an op of ALL without a case.

The shapes are awkward on purpose: odd widths, unequal head widths such as [1, 3, 2], seq_len 5 or 7, values
read by several nodes (and twice by one node), repeat 2 and groups inside groups.
"""

from __future__ import annotations

CHARS = "abcdefg"  # the char tokenizer's alphabet: a vocabulary of 7, odd, small enough that windows repeat ids
VOCAB = len(CHARS)
DEFAULT_SEQ_LEN = 5
HEADS = [1, 3, 2]  # unequal widths, one of them 1 and one odd; they sum to 6


def edges(*pairs: str) -> list[dict]:
    """Edges from "a.out -> b.x" strings."""
    return [{"from": a, "to": b} for a, b in (pair.split(" -> ") for pair in pairs)]


def document(nodes: list[dict], wires: list[str], dims: dict | None = None, groups: dict | None = None) -> dict:
    doc = {"microgpt_graph": 1, "nodes": nodes, "edges": edges(*wires)}
    if dims:
        doc["dims"] = dims
    if groups:
        doc["groups"] = groups
    return doc


def with_head(nodes: list[dict], wires: list[str], source: str, **extra) -> dict:
    """The document of `nodes` with a logits node on `source`, the graph's logits output and its loss."""
    nodes = [*nodes, {"id": "head", "op": "logits"}, {"id": "loss", "op": "cross_entropy"}]
    wires = [*wires, f"{source} -> head.x", "head.out -> logits", "head.out -> loss.logits"]
    return document(nodes, wires, **extra)


def emb(node_id: str = "emb", width: int | str = 5) -> dict:
    return {"id": node_id, "op": "embedding", "params": {"width": width}}


def lin(node_id: str, out: int | str, bias: bool = True, **params) -> dict:
    return {"id": node_id, "op": "linear", "params": {"out": out, "bias": bias, **params}}


# ---- position-wise ops --------------------------------------------------------------------------------


def embedding_case():
    """Two embeddings of the token ids (a fan-out of `tokens`), one taking its width from dims."""
    nodes = [{"id": "e1", "op": "embedding"}, emb("e2", 3), {"id": "sum", "op": "add"}]
    wires = ["tokens -> e1.ids", "tokens -> e2.ids", "e1.out -> sum.in", "e2.out -> sum.in"]
    return with_head(nodes, wires, "sum.out", dims={"d": 3})


def linear_case():
    """A linear with bias and one without (lecun init) on one input; the first read twice by one add."""
    nodes = [emb(), lin("a", 3), lin("b", 3, bias=False, init="lecun"), {"id": "sum", "op": "add"}]
    wires = ["tokens -> emb.ids", "emb.out -> a.x", "emb.out -> b.x", "a.out -> sum.in", "b.out -> sum.in",
             "a.out -> sum.in"]
    return with_head(nodes, wires, "sum.out"), 7


def logits_case():
    """Two logits nodes (one without bias) added, as a prior is added to a model's scores; the second also
    read by a loss of its own, offset 2 and weight 0.5."""
    nodes = [emb(), {"id": "ln", "op": "layer_norm"}, {"id": "main", "op": "logits"},
             {"id": "side", "op": "logits", "params": {"bias": False}}, {"id": "sum", "op": "add"},
             {"id": "loss", "op": "cross_entropy"},
             {"id": "side_loss", "op": "cross_entropy", "params": {"offset": 2, "weight": 0.5}}]
    wires = ["tokens -> emb.ids", "emb.out -> ln.x", "ln.out -> main.x", "emb.out -> side.x", "main.out -> sum.in",
             "side.out -> sum.in", "sum.out -> logits", "sum.out -> loss.logits", "side.out -> side_loss.logits"]
    return document(nodes, wires)


def stream_case():
    """stream_read and stream_write at their default widths (d and stream_dim), around a GELU, the write
    added back into the stream it read."""
    nodes = [emb("emb", "stream_dim"), {"id": "read", "op": "stream_read"}, {"id": "act", "op": "gelu"},
             {"id": "write", "op": "stream_write"}, {"id": "sum", "op": "add"}]
    wires = ["tokens -> emb.ids", "emb.out -> read.x", "read.out -> act.x", "act.out -> write.x",
             "emb.out -> sum.in", "write.out -> sum.in"]
    return with_head(nodes, wires, "sum.out", dims={"d": 3, "stream_dim": 5})


def linear_relu_case():
    """A linear with bias read only by a relu: the compiler fuses the two into linear_relu."""
    nodes = [emb(), lin("up", 7), {"id": "relu", "op": "relu"}, lin("down", 5), {"id": "sum", "op": "add"}]
    wires = ["tokens -> emb.ids", "emb.out -> up.x", "up.out -> relu.x", "relu.out -> down.x", "emb.out -> sum.in",
             "down.out -> sum.in"]
    return with_head(nodes, wires, "sum.out")


def relu_case():
    """relu left unfused twice: after a linear without bias, and after a linear with bias that an add reads
    too (a fan-out: fusing would lose the pre-activation the add needs)."""
    nodes = [emb(), lin("a", 3, bias=False), {"id": "r1", "op": "relu"}, lin("b", 3), {"id": "r2", "op": "relu"},
             {"id": "sum", "op": "add"}]
    wires = ["tokens -> emb.ids", "emb.out -> a.x", "a.out -> r1.x", "emb.out -> b.x", "b.out -> r2.x",
             "r1.out -> sum.in", "r2.out -> sum.in", "b.out -> sum.in"]
    return with_head(nodes, wires, "sum.out")


def layer_norm_case():
    """Two LayerNorms of odd widths, 5 and 3, the first read twice."""
    nodes = [emb(), {"id": "ln1", "op": "layer_norm"}, lin("lin", 3), {"id": "ln2", "op": "layer_norm"},
             lin("back", 3, bias=False), {"id": "sum", "op": "add"}]
    wires = ["tokens -> emb.ids", "emb.out -> ln1.x", "ln1.out -> lin.x", "lin.out -> ln2.x", "ln1.out -> back.x",
             "ln2.out -> sum.in", "back.out -> sum.in"]
    return with_head(nodes, wires, "sum.out"), 7


def gelu_case():
    """GELU on a stream and on the logits themselves (an elementwise op takes either)."""
    nodes = [emb("emb", 4), lin("lin", 5), {"id": "act", "op": "gelu"}, {"id": "head", "op": "logits"},
             {"id": "soft", "op": "gelu"}, {"id": "loss", "op": "cross_entropy"}]
    wires = ["tokens -> emb.ids", "emb.out -> lin.x", "lin.out -> act.x", "act.out -> head.x", "head.out -> soft.x",
             "soft.out -> logits", "soft.out -> loss.logits"]
    return document(nodes, wires)


def add_case():
    """An add of three inputs, one of them given twice, and an add of a single input."""
    nodes = [emb(), lin("lin", 5), {"id": "sum", "op": "add"}, {"id": "one", "op": "add"}]
    wires = ["tokens -> emb.ids", "emb.out -> lin.x", "emb.out -> sum.in", "lin.out -> sum.in", "emb.out -> sum.in",
             "sum.out -> one.in"]
    return with_head(nodes, wires, "one.out")


def mul_case():
    """a * b of two linears, then that product times itself (one value on both ports)."""
    nodes = [emb(), lin("a", 5), lin("b", 5, bias=False), {"id": "ab", "op": "mul"}, {"id": "sq", "op": "mul"}]
    wires = ["tokens -> emb.ids", "emb.out -> a.x", "emb.out -> b.x", "a.out -> ab.a", "b.out -> ab.b",
             "ab.out -> sq.a", "ab.out -> sq.b"]
    return with_head(nodes, wires, "sq.out")


def scale_case():
    """scale on a stream (0.7) and on the logits (-1.3)."""
    nodes = [emb("emb", 3), {"id": "s", "op": "scale", "params": {"by": 0.7}}, {"id": "head", "op": "logits"},
             {"id": "neg", "op": "scale", "params": {"by": -1.3}}, {"id": "loss", "op": "cross_entropy"}]
    wires = ["tokens -> emb.ids", "emb.out -> s.x", "s.out -> head.x", "head.out -> neg.x", "neg.out -> logits",
             "neg.out -> loss.logits"]
    return document(nodes, wires)


def concat_case():
    """Widths 1, 3 and 2 side by side, the first twice."""
    nodes = [emb("emb", 1), lin("three", 3), lin("two", 2, bias=False), {"id": "cat", "op": "concat"}]
    wires = ["tokens -> emb.ids", "emb.out -> three.x", "three.out -> two.x", "emb.out -> cat.in",
             "three.out -> cat.in", "two.out -> cat.in", "emb.out -> cat.in"]
    return with_head(nodes, wires, "cat.out"), 7


def split_case():
    """Width 6 cut into [1, 3, 2]; the middle part reaches no loss, the others are joined in another order."""
    nodes = [emb("emb", 6), {"id": "cut", "op": "split", "params": {"widths": [1, 3, 2]}},
             {"id": "cat", "op": "concat"}, lin("mix", 3)]
    wires = ["tokens -> emb.ids", "emb.out -> cut.x", "cut.out2 -> cat.in", "cut.out0 -> cat.in", "cat.out -> mix.x"]
    return with_head(nodes, wires, "mix.out")


def narrow_case():
    """The first 2 of 5 columns kept, added back to the stream."""
    nodes = [emb(), lin("lin", 5), {"id": "keep", "op": "narrow", "params": {"keep": 2}}, {"id": "sum", "op": "add"}]
    wires = ["tokens -> emb.ids", "emb.out -> lin.x", "lin.out -> keep.x", "emb.out -> sum.in", "keep.out -> sum.in"]
    return with_head(nodes, wires, "sum.out")


# ---- ops that mix positions -----------------------------------------------------------------------------


def qkv(bias_k: bool = True) -> tuple[list[dict], list[str]]:
    """An embedding of width 6 and three linears reading it: q, k and v."""
    nodes = [emb("emb", 6), lin("q", 6), lin("k", 6, bias=bias_k), lin("v", 6)]
    return nodes, ["tokens -> emb.ids", "emb.out -> q.x", "emb.out -> k.x", "emb.out -> v.x"]


def attention_node(mask: str = "causal", heads=None, gap: int = 1) -> dict:
    return {"id": "att", "op": "attention", "params": {"heads": HEADS if heads is None else heads, "mask": mask,
                                                         "gap": gap}}


def attention_case(mask: str = "causal", heads=None, gap: int = 1, seq_len: int = 7):
    """Attention without RoPE over heads [1, 3, 2] (or `heads`) under `mask`, its output through a linear."""
    nodes, wires = qkv()
    nodes += [attention_node(mask, heads, gap), lin("wo", 6)]
    wires += ["q.out -> att.q", "k.out -> att.k", "v.out -> att.v", "att.out -> wo.x"]
    return with_head(nodes, wires, "wo.out"), seq_len


def gap_head(nodes: list[dict], wires: list[str], source: str, offset: int) -> dict:
    """A sound home for a gap-masked attention at `source`: its own logits and a loss `offset` <= gap ahead
    (a target the gap hides), the main head reading the embedding."""
    nodes = [*nodes, {"id": "side", "op": "logits"},
             {"id": "side_loss", "op": "cross_entropy", "params": {"offset": offset, "weight": 0.5}}]
    wires = [*wires, f"{source} -> side.x", "side.out -> side_loss.logits"]
    return with_head(nodes, wires, "emb.out")


def gap_attention_case(gap: int, offset: int, seq_len: int):
    """Gap-masked attention (t sees t and before, and t + gap + 1 on) over heads [1, 3, 2], read by a loss
    whose target the gap hides."""
    nodes, wires = qkv()
    nodes += [attention_node("gap", gap=gap), lin("wo", 6)]
    wires += ["q.out -> att.q", "k.out -> att.k", "v.out -> att.v", "att.out -> wo.x"]
    return gap_head(nodes, wires, "wo.out", offset), seq_len


def rope_case():
    """RoPE left unfused: the queries' rope is read by the attention and by an add (read twice), the keys'
    rope splits the heads otherwise than the attention does ([3, 3] against [1, 3, 2])."""
    nodes, wires = qkv(bias_k=False)
    nodes += [{"id": "rq", "op": "rope", "params": {"heads": HEADS}},
              {"id": "rk", "op": "rope", "params": {"heads": [3, 3]}},
              attention_node(), {"id": "sum", "op": "add"}]
    wires += ["q.out -> rq.x", "k.out -> rk.x", "rq.out -> att.q", "rk.out -> att.k", "v.out -> att.v",
              "att.out -> sum.in", "rq.out -> sum.in"]
    return with_head(nodes, wires, "sum.out"), 7


def rope_attention_groups() -> dict:
    """`tower`: two library transformer blocks (repeat 2, each an attention group inside a block group) and a
    LayerNorm, its params read from where it is used."""
    return {"tower": {
        "params": {"d": None, "heads": None, "d_ff": None},
        "inputs": {"x": "stream[d]"}, "outputs": {"y": "stream[d]"},
        "nodes": [{"id": "blocks", "group": "transformer_block", "repeat": 2}, {"id": "ln", "op": "layer_norm"}],
        "edges": edges("x -> blocks.x", "blocks.x -> ln.x", "ln.out -> y")}}


def rope_attention_case():
    """The library attention group (rope nodes read by the attention alone: the compiler folds them in), in a
    transformer block repeated twice inside a group; heads [1, 3, 2], the feed-forward fused too."""
    nodes = [emb("emb", "d"), {"id": "tower", "group": "tower", "params": {"heads": HEADS}}]
    wires = ["tokens -> emb.ids", "emb.out -> tower.x"]
    return with_head(nodes, wires, "tower.y", dims={"d": 6, "heads": [2, 2, 2], "d_ff": 5},
                     groups=rope_attention_groups()), 7


def rope_attention_gap_case():
    """A rope pair folded into a gap-masked attention (gap 2), heads [1, 3, 2], read by a loss 2 ahead."""
    nodes, wires = qkv()
    nodes += [{"id": "rq", "op": "rope", "params": {"heads": HEADS}},
              {"id": "rk", "op": "rope", "params": {"heads": HEADS}}, attention_node("gap", gap=2), lin("wo", 6)]
    wires += ["q.out -> rq.x", "k.out -> rk.x", "rq.out -> att.q", "rk.out -> att.k", "v.out -> att.v",
              "att.out -> wo.x"]
    return gap_head(nodes, wires, "wo.out", 2), 7


def shared_qk_case():
    """One linear read as both queries and keys (a fan-out into two ports of one node), equal heads (3 of 2)."""
    nodes = [emb("emb", 6), lin("qk", 6), lin("v", 6, bias=False), attention_node(heads=3)]
    wires = ["tokens -> emb.ids", "emb.out -> qk.x", "emb.out -> v.x", "qk.out -> att.q", "qk.out -> att.k",
             "v.out -> att.v"]
    return with_head(nodes, wires, "att.out"), 5


def prefix_mean_case():
    """The causal prefix mean of a stream, added to it."""
    nodes = [emb("emb", 3), {"id": "pm", "op": "prefix_mean"}, {"id": "sum", "op": "add"}]
    wires = ["tokens -> emb.ids", "emb.out -> pm.x", "emb.out -> sum.in", "pm.out -> sum.in"]
    return with_head(nodes, wires, "sum.out"), 7


def shift_case(by: int = 2, seq_len: int = 7):
    """A stream shifted `by` positions ahead (the last rows reading the window's last), added to a linear of the
    unshifted one, under a loss with offset by + 1 (which may read it) beside the main head on the embedding."""
    nodes = [emb("emb", 3), {"id": "sh", "op": "shift", "params": {"by": by}}, lin("lin", 3), {"id": "sum", "op": "add"},
             {"id": "head", "op": "logits"}, {"id": "ahead", "op": "logits"},
             {"id": "loss", "op": "cross_entropy"},
             {"id": "far", "op": "cross_entropy", "params": {"offset": by + 1, "weight": 0.5}}]
    wires = ["tokens -> emb.ids", "emb.out -> sh.x", "emb.out -> lin.x", "sh.out -> sum.in", "lin.out -> sum.in",
             "emb.out -> head.x", "sum.out -> ahead.x", "head.out -> logits", "head.out -> loss.logits",
             "ahead.out -> far.logits"]
    return document(nodes, wires), seq_len


def cross_entropy_case():
    """Three weighted losses: the main one (weight 0.8), one offset 3 on the same logits (weight 0.25), and one
    offset 2 on a second head (weight 0.5)."""
    nodes = [emb("emb", 4), {"id": "head", "op": "logits"}, lin("lin", 5), {"id": "act", "op": "gelu"},
             {"id": "ahead", "op": "logits"},
             {"id": "loss", "op": "cross_entropy", "params": {"weight": 0.8}},
             {"id": "far", "op": "cross_entropy", "params": {"offset": 3, "weight": 0.25}},
             {"id": "next2", "op": "cross_entropy", "params": {"offset": 2, "weight": 0.5}}]
    wires = ["tokens -> emb.ids", "emb.out -> head.x", "emb.out -> lin.x", "lin.out -> act.x", "act.out -> ahead.x",
             "head.out -> logits", "head.out -> loss.logits", "head.out -> far.logits", "ahead.out -> next2.logits"]
    return document(nodes, wires)


OP_CASES = {
    "embedding": embedding_case,
    "linear": linear_case,
    "logits": logits_case,
    "stream_read": stream_case,
    "stream_write": stream_case,
    "linear_relu": linear_relu_case,
    "layer_norm": layer_norm_case,
    "relu": relu_case,
    "gelu": gelu_case,
    "add": add_case,
    "mul": mul_case,
    "scale": scale_case,
    "concat": concat_case,
    "split": split_case,
    "narrow": narrow_case,
    "rope": rope_case,
    "attention": attention_case,
    "rope_attention": rope_attention_case,
    "prefix_mean": prefix_mean_case,
    "shift": shift_case,
    "cross_entropy": cross_entropy_case,
}

VARIANT_CASES = {
    "attention_gap1": lambda: gap_attention_case(gap=1, offset=1, seq_len=7),
    "attention_gap3": lambda: gap_attention_case(gap=3, offset=2, seq_len=5),
    "attention_full": lambda: attention_case("full"),
    "attention_anticausal": lambda: attention_case("anticausal", heads=[2, 1, 3], seq_len=5),
    "attention_shared_qk": shared_qk_case,
    "shift_past_the_end": lambda: shift_case(by=4, seq_len=5),
    "rope_attention_gap": rope_attention_gap_case,
}

# Cases that see the future by design (the masks that exist so that the causality check has something to
# refuse): the family's build refuses them, so the op tests build their models past that check, and test
# that the check does refuse them.
UNSOUND_CASES = {"attention_full", "attention_anticausal"}
