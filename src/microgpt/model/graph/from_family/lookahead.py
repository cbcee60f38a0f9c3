"""lookahead as a graph: gpt's trunk and main head (from_family/gpt.py), then K extra heads over the trunk's last
states, each a library group with its own loss (library/lookahead.yaml).

- mode mtp: head k is an `mtp_head` of head_layers causal blocks (0: a LayerNorm and logits on the trunk's last
  state, its blocks passing the state through) predicting the token at t + 1 + k (offset 1 + k);
- mode gap: head k is a `gap_head` of head_layers gap blocks that also read the token embeddings (tok_emb's
  output, the family's `memory`), hiding the k positions after t and predicting the token at t + 1;
- mode hydra: head k is a `hydra_head` of head_layers hydra layers over the trunk's state at t and the token
  embeddings shifted by 1 .. k (`shift` nodes shift1 .. shiftK on tok_emb's output, as the family's memory
  repeats the window's last token past its end), side by side (a concat per head), predicting the token at
  t + 1 + k. Its layers' token weights are one matrix, the family's token1.w .. token<k>.w stacked (the same
  draws in the same order), named token.w.

Each head's cross_entropy weighs W/K in the objective (W: lookahead_weight), as the family's
main loss + W x the mean of the heads' losses does. The heads are the nodes head1 .. headK, so their losses
reach the metrics log as "head<k>_loss", the family's keys; their parameters are the family's in its order
(lookahead.<k>.<rest> there, head<k>.<rest> here).
"""

from __future__ import annotations

import math
import re

from microgpt.core.errors import ConfigError
from microgpt.model.family import family
from microgpt.model.graph.document import FORMAT_VERSION, VERSION_KEY
from microgpt.model.graph.from_family.gpt import edge, trunk_dims, trunk_nodes


def head_nodes(config) -> tuple[list[dict], list[dict]]:
    """(nodes, edges) of the K extra heads, each reading the trunk's last states (and in modes gap and hydra the
    token embeddings) on a document's top level after trunk_nodes'."""
    share = config.lookahead_weight / config.lookahead  # each head's weight in the objective
    nodes, edges = [], []
    if config.lookahead_mode == "hydra":
        for j in range(1, config.lookahead + 1):
            nodes.append({"id": f"shift{j}", "op": "shift", "params": {"by": j}})
            edges.append(edge("tok_emb.out", f"shift{j}.x"))
    for k in range(1, config.lookahead + 1):
        name = f"head{k}"
        if config.lookahead_mode == "hydra":
            init = math.sqrt(2.0 / ((k + 1) * config.d_model))  # hydra_layer_specs' draw for the first product
            params = {"layers": config.head_layers, "k": k, "init": init, "weight": share}
            nodes += [{"id": f"{name}_tokens", "op": "concat"}, {"id": name, "group": "hydra_head", "params": params}]
            edges += [edge(f"shift{j}.out", f"{name}_tokens.in") for j in range(1, k + 1)]
            edges += [edge("blocks.x", f"{name}.x"), edge(f"{name}_tokens.out", f"{name}.tokens")]
        elif config.lookahead_mode == "gap":
            params = {"layers": config.head_layers, "hidden": k, "weight": share}
            nodes.append({"id": name, "group": "gap_head", "params": params})
            edges += [edge("blocks.x", f"{name}.x"), edge("tok_emb.out", f"{name}.memory")]
        else:
            params = {"layers": config.head_layers, "offset": 1 + k, "weight": share}
            nodes.append({"id": name, "group": "mtp_head", "params": params})
            edges.append(edge("blocks.x", f"{name}.x"))
    return nodes, edges


def document(config) -> dict:
    """The graph document of a lookahead model with this LookaheadConfig (one without --lookahead-distill: a
    graph's losses are against the true tokens)."""
    if config.lookahead_distill:
        raise ConfigError("a graph document has no loss against another head's distribution, so --lookahead-distill "
                          "has no graph; drop it for from-family")
    nodes, edges = trunk_nodes(config)
    extra_nodes, extra_edges = head_nodes(config)
    return {VERSION_KEY: FORMAT_VERSION, "description": f"from-family {family('lookahead').describe(config)}",
            "dims": trunk_dims(config), "nodes": nodes + extra_nodes, "edges": edges + extra_edges}


def graph_name(name: str) -> str:
    """A lookahead parameter's name in its graph: lookahead.<k>.<rest> is head<k>.<rest>, and a hydra layer's
    token<j>.w (j = 1 .. k) is part of one token.w; the trunk's the same."""
    if name.startswith("lookahead."):
        k, rest = name.removeprefix("lookahead.").split(".", 1)
        return re.sub(r"\.token\d+\.w$", ".token.w", f"head{k}.{rest}")
    return name
