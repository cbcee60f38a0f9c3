"""A small shape for every registered family (a model of a few hundred parameters), for the tests that hold
every family to a rule (test_causality.py, test_leaks.py): a family registered without one fails them, so a new
family cannot skip the checks. VARIANTS adds the shapes of a family's other modes."""

from __future__ import annotations

VOCAB = 11


def _edges(*pairs: str) -> list[dict]:
    return [{"from": a, "to": b} for a, b in (pair.split(" -> ") for pair in pairs)]


TINY_GRAPH = {  # a parallel block (attention and a GELU feed-forward side by side) and a second head, offset 2
    "microgpt_graph": 1,
    "dims": {"d": 6, "heads": [2, 4], "d_ff": 8},
    "groups": {"parallel": {
        "params": {"d": None, "heads": None, "d_ff": None},
        "inputs": {"x": "stream[d]"}, "outputs": {"x": "stream[d]"},
        "nodes": [{"id": "ln", "op": "layer_norm"}, {"id": "attn", "group": "attention"},
                  {"id": "up", "op": "linear", "params": {"out": "d_ff"}}, {"id": "gelu", "op": "gelu"},
                  {"id": "down", "op": "linear", "params": {"out": "d"}}, {"id": "sum", "op": "add"}],
        "edges": _edges("x -> ln.x", "ln.out -> attn.x", "ln.out -> up.x", "up.out -> gelu.x", "gelu.out -> down.x",
                        "x -> sum.in", "attn.y -> sum.in", "down.out -> sum.in", "sum.out -> x")}},
    "nodes": [{"id": "emb", "op": "embedding"}, {"id": "blocks", "group": "parallel", "repeat": 2},
              {"id": "norm", "op": "layer_norm"}, {"id": "head", "op": "logits"},
              {"id": "loss", "op": "cross_entropy"},
              {"id": "ahead", "group": "mtp_head", "params": {"offset": 2, "weight": 0.5}}],
    "edges": _edges("tokens -> emb.ids", "emb.out -> blocks.x", "blocks.x -> norm.x", "norm.out -> head.x",
                    "head.out -> loss.logits", "head.out -> logits", "blocks.x -> ahead.x"),
}
TINY = {  # family -> its shape settings
    "gpt": {"d_model": 6, "n_layers": 2, "head_dims": (2, 4), "d_ff": 8, "seq_len": 9},
    "ensemble": {"cooperative": "d4n1,d2+2n1", "stream_dim": 5, "prior": "counter", "router": "gated", "seq_len": 9},
    "lookahead": {"d_model": 6, "n_layers": 2, "head_dims": (2, 4), "d_ff": 8, "seq_len": 9, "lookahead": 3,
                  "lookahead_mode": "mtp"},  # the default, hydra, is among the VARIANTS
    "graph": {"graph": TINY_GRAPH, "seq_len": 9},
}
GRAPH_HEADS = 2  # TINY_GRAPH's: the main head and "ahead"
VARIANTS = [(name, shape) for name, shape in TINY.items()] + [  # (family, shape): every head kind there is
    ("lookahead", {**TINY["lookahead"], "lookahead_mode": "gap", "head_layers": 2}),
    ("lookahead", {**TINY["lookahead"], "lookahead_mode": "hydra", "head_layers": 2}),
]
