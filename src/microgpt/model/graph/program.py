"""What the compiler makes (compile.py): a `Program`, the flat list of primitives a graph model runs, with
its values' types, its parameters in the document's order and what each pass needs; and the group
instances it was flattened from (`Instance`), for `graph show`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from microgpt.model.graph.ops.base import Node, ValueType
from microgpt.model.params import ParamSpec


@dataclass
class Instance:
    """A group used in the graph, for `graph show`: where it sits, which group, its ports' types."""

    path: tuple[str, ...]
    group: str
    ports: dict[str, str]
    depth: int


@dataclass
class Program:
    nodes: list[Node]  # primitives in forward order
    values: dict[int, ValueType]  # value id -> its type
    tokens: int  # the value id of the token ids
    logits: int  # the value id wired to the graph's logits output
    main_loss: int  # index in nodes of the loss on the logits output
    specs: list[ParamSpec]  # every parameter, in the document's order
    dims: dict  # every dimension bound at the top: vocab, T and the document's
    instances: list[Instance] = field(default_factory=list)
    verdict: str | None = None  # the causality check's (causality.py), once it has run

    @property
    def losses(self) -> list[int]:
        """Indices of every loss node, the main one first."""
        return [self.main_loss] + [i for i, n in enumerate(self.nodes) if n.op.name == "cross_entropy"
                                   and i != self.main_loss]

    def needed(self, targets: list[int]) -> list[int]:
        """Indices of the nodes the given values or node outputs need, in forward order."""
        producer = {vid: i for i, n in enumerate(self.nodes) for vid in n.outputs.values()}
        wanted, stack = set(), list(targets)
        while stack:
            vid = stack.pop()
            i = producer.get(vid)
            if i is not None and i not in wanted:
                wanted.add(i)
                stack.extend(self.nodes[i].input_ids())
        return sorted(wanted)

    def needed_for_node(self, index: int) -> list[int]:
        return sorted(set(self.needed(self.nodes[index].input_ids())) | {index})

    def metric_name(self, index: int) -> str:
        """A non-main loss's key in the metrics log: its path, without a last ".loss", then "_loss"."""
        name = self.nodes[index].name
        return name.removesuffix(".loss").replace(".", "_") + "_loss"
