"""The primitives by name: position-wise (basic.py), mixing positions (attention.py), the loss (loss.py), and
the ensemble's priors, routers and mixing (ensemble.py). `OPS` is every op a document may name; the ones the
compiler makes itself (`internal`) are refused in a document."""

from __future__ import annotations

from microgpt.model.graph.ops import attention, basic, ensemble, loss

ALL = {op.name: op for module in (basic, attention, loss, ensemble) for op in module.OPS}
OPS = {name: op for name, op in ALL.items() if not getattr(op, "internal", False)}
