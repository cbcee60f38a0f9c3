"""The graph family: a model that is a typed graph of primitives, compiled (model/family.py says what a
family gives; document.py the document, compile.py the compiler, ops/ the primitives, model.py the passes,
causality.py the check before training, from_family.py the graph of each family, library.yaml the groups
a document can use by name; docs/graphs.md the format).
"""

from __future__ import annotations

from microgpt.model.graph.config import GraphConfig
from microgpt.model.graph.model import GraphModel
from microgpt.model.params import ParamSpec

Config = GraphConfig
SELECTED_BY = "graph"  # --graph G.json chooses this family without --family


def param_specs(config: GraphConfig, prefix: str = "") -> list[ParamSpec]:
    return [ParamSpec(prefix + s.name, s.shape, s.init_std, s.init_value, s.decay, s.trainable)
            for s in config.program.specs]


def build(config: GraphConfig, backend, tokenizer, seed: int) -> GraphModel:
    return GraphModel(config, config.program, backend, tokenizer, seed)


def memory_parts(config: GraphConfig, batch: int, backend) -> dict[str, int]:
    """What a step keeps from forward to backward, and backward's largest temporary (memory.py)."""
    from microgpt.model.graph.memory import program_parts

    return program_parts(config.program, batch, backend)


def describe(config: GraphConfig) -> str:
    """'graph of 58 primitives (12 kinds), 4 losses: d 96, d_ff 384, seq_len 64'."""
    program = config.program
    kinds = len({n.op.name for n in program.nodes})
    losses = len(program.losses)
    dims = ", ".join(f"{k} {v}" for k, v in program.dims.items() if k not in ("vocab", "T"))
    return (f"graph of {len(program.nodes)} primitives ({kinds} kinds), {losses} loss{'es' if losses != 1 else ''}"
            f"{': ' + dims if dims else ''}, seq_len {config.seq_len}")


__all__ = ["SELECTED_BY", "Config", "build", "describe", "memory_parts", "param_specs"]
