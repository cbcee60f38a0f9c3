"""gpt as a graph: embedding, n_layers transformer blocks, final LayerNorm, logits and the next-token loss, with
gpt's own parameter names (tok_emb, blocks.<i>.attn.wq.w, ..., head.b)."""

from __future__ import annotations

from microgpt.model.family import family
from microgpt.model.graph.document import FORMAT_VERSION, VERSION_KEY


def edge(source: str, target: str) -> dict:
    return {"from": source, "to": target}


def trunk_nodes(config) -> tuple[list[dict], list[dict]]:
    """(nodes, edges) of gpt's trunk and main head on a document's top level: tokens in, logits out."""
    nodes = [{"id": "tok_emb", "op": "embedding"},
             {"id": "blocks", "group": "transformer_block", "repeat": config.n_layers},
             {"id": "final_norm", "op": "layer_norm"},
             {"id": "head", "op": "logits"},
             {"id": "loss", "op": "cross_entropy"}]
    edges = [edge("tokens", "tok_emb.ids"), edge("tok_emb.out", "blocks.x"), edge("blocks.x", "final_norm.x"),
             edge("final_norm.out", "head.x"), edge("head.out", "loss.logits"), edge("head.out", "logits")]
    return nodes, edges


def trunk_dims(config) -> dict:
    return {"d": config.d_model, "d_ff": config.d_ff, "heads": list(config.head_dims)}


def document(config) -> dict:
    nodes, edges = trunk_nodes(config)
    return {VERSION_KEY: FORMAT_VERSION, "description": f"from-family {family('gpt').describe(config)}",
            "dims": trunk_dims(config), "nodes": nodes, "edges": edges}


def graph_name(name: str) -> str:
    """A gpt parameter's name in its graph: the same."""
    return name
