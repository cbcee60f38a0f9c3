"""lookahead as a graph: gpt's trunk and main head (from_family/gpt.py), then K extra heads over the trunk's last
states, each a library group with its own loss (library/lookahead.yaml).

- mode mtp: head k is an `mtp_head` of head_layers causal blocks (0: a LayerNorm and logits on the trunk's last
  state, its blocks passing the state through) predicting the token at t + 1 + k (offset 1 + k);
- mode gap: head k is a `gap_head` of head_layers gap blocks that also read the token embeddings (tok_emb's
  output, the family's `memory`), hiding the k positions after t and predicting the token at t + 1.

Each head's cross_entropy weighs W/K in the objective (W: lookahead_weight), as the family's
main loss + W x the mean of the heads' losses does. The heads are the nodes head1 .. headK, so their losses
reach the metrics log as "head<k>_loss", the family's keys; their parameters are the family's in its order
(lookahead.<k>.<rest> there, head<k>.<rest> here).
"""

from __future__ import annotations

from microgpt.core.errors import ConfigError
from microgpt.model.family import family
from microgpt.model.graph.document import FORMAT_VERSION, VERSION_KEY
from microgpt.model.graph.from_family.gpt import edge, trunk_dims, trunk_nodes


def head_nodes(config) -> tuple[list[dict], list[dict]]:
    """(nodes, edges) of the K extra heads, each reading the trunk's last states (and in mode gap the token
    embeddings) on a document's top level after trunk_nodes'."""
    share = config.lookahead_weight / config.lookahead  # each head's weight in the objective
    nodes, edges = [], []
    for k in range(1, config.lookahead + 1):
        name = f"head{k}"
        if config.lookahead_mode == "gap":
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
    graph's losses are against the true tokens; and in mode mtp or gap: the library has no hydra head)."""
    if config.lookahead_mode == "hydra":
        raise ConfigError("the graph library has no hydra head (it reads the tokens after its position, shifted, "
                          "which no graph op does), so --lookahead-mode hydra has no graph, for from-family or "
                          "export; those take --lookahead-mode mtp or gap")
    if config.lookahead_distill:
        raise ConfigError("a graph document has no loss against another head's distribution, so --lookahead-distill "
                          "has no graph; drop it for from-family")
    nodes, edges = trunk_nodes(config)
    extra_nodes, extra_edges = head_nodes(config)
    return {VERSION_KEY: FORMAT_VERSION, "description": f"from-family {family('lookahead').describe(config)}",
            "dims": trunk_dims(config), "nodes": nodes + extra_nodes, "edges": edges + extra_edges}
