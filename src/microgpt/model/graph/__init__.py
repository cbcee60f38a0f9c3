"""The graph family: a model that is a typed graph of primitives, compiled (model/family.py says what a
family gives). document.py reads the document, compile.py flattens and checks it into a Program
(program.py; rewrite.py fuses known subgraphs), ops/ holds the primitives, model.py runs the passes,
decode.py the KV-cache decoder, causality.py the check before training, memory.py the estimate,
from_family/ the graph of each family and library/ the groups a document can use by name. docs/graphs.md
describes the format.
"""

from __future__ import annotations

from pathlib import Path

from microgpt.core.errors import ConfigError, Named
from microgpt.model.graph.causality import check_causality
from microgpt.model.graph.config import GraphConfig
from microgpt.model.graph.document import read_document
from microgpt.model.graph.model import GraphModel
from microgpt.model.params import ParamSpec

Config = GraphConfig
SELECTED_BY = "graph"  # --graph G.json chooses this family without --family
SPEC_KEYS = ("graph",)  # what a --compare entry fixes: --family graph --compare a.json,b.json


def param_specs(config: GraphConfig, prefix: str = "") -> list[ParamSpec]:
    if not prefix:  # the program's own (a ParamSpec is frozen)
        return list(config.program.specs)
    return [ParamSpec(prefix + s.name, s.shape, s.init_std, s.init_value, s.decay, s.trainable)
            for s in config.program.specs]


def build(config: GraphConfig, backend, tokenizer, seed: int) -> GraphModel:
    """A new model with weights drawn from `seed`, once the graph has passed the causality check (a ConfigError
    naming where the future enters, otherwise)."""
    check_causality(config.program, config.seq_len, tokenizer)
    return GraphModel(config, config.program, backend, tokenizer, seed)


def of_family(family_name: str, model, tokenizer) -> GraphModel:
    """A trained model of another family as its graph (from_family/), on the model's backend, with its weights under
    the graph's names and its optimiser step (the ensemble's prior switches off at one): the model's outputs,
    node by node, from the same kernels (use/inspect traces every family through this)."""
    from microgpt.model.graph.from_family import document_for, graph_weights

    config = GraphConfig(vocab_size=model.config.vocab_size, graph=document_for(family_name, model.config),
                         seq_len=model.config.seq_len)
    graph = GraphModel(config, config.program, model.be, tokenizer, seed=0)
    graph.params.from_host(graph_weights(family_name, model.params.to_host()))
    graph.params.step = model.params.step
    return graph


def memory_parts(config: GraphConfig, batch: int, backend) -> dict[str, int]:
    """What a step keeps from forward to backward, and backward's largest temporary (memory.py)."""
    from microgpt.model.graph.memory import program_parts

    return program_parts(config.program, batch, backend)


def parse_specs(text: str, settings) -> list[tuple[str, dict]]:
    """--compare with --family graph: documents separated by ',', each run named by its file's stem."""
    paths = [part.strip() for part in text.split(",")]
    if not all(paths):
        raise ConfigError(Named("compare", text), " has an empty entry; list graph documents separated by ',', "
                          "e.g. a.json,b.json")
    names = [Path(path).stem for path in paths]
    if len(set(names)) != len(names):
        raise ConfigError(Named("compare", text), f" names two documents alike ({', '.join(names)}); each run is "
                          "named by its file's stem, so give the files different names")
    for path in paths:
        read_document(path)  # every document read and checked before any training
    return [(name, {"graph": path}) for name, path in zip(names, paths)]


def describe(config: GraphConfig) -> str:
    """'graph of 58 primitives (12 kinds), 4 losses: d 96, d_ff 384, seq_len 64'."""
    program = config.program
    kinds = len({n.op.name for n in program.nodes})
    losses = len(program.losses)
    dims = ", ".join(f"{k} {v}" for k, v in program.dims.items() if k not in ("vocab", "T"))
    return (f"graph of {len(program.nodes)} primitives ({kinds} kinds), {losses} loss{'es' if losses != 1 else ''}"
            f"{': ' + dims if dims else ''}, seq_len {config.seq_len}")


__all__ = ["SELECTED_BY", "SPEC_KEYS", "Config", "build", "describe", "memory_parts", "of_family", "param_specs",
           "parse_specs"]
