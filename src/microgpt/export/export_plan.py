"""The plan: a compiled graph's path to its logits as a flat list of steps, the one form both exporters read.

Every family is exported through its graph (model/graph/from_family writes the graph equal to a gpt, ensemble
or lookahead model, with the family's parameter order), so one translation of the primitives serves them all.
A plan is JSON-ready (it travels inside a model.pt) and names each weight as the checkpoint does:

    {"vocab": V, "seq_len": T, "ids": "ids", "logits": "v41",
     "weights": {name: {"shape": [...], "decay": bool, "trainable": bool}},
     "steps": [{"op": ..., "inputs": [value, ...], "outputs": [value, ...], "params": {...},
                "weights": {role: name}}, ...]}

Only the nodes the logits need are kept (a lookahead model's extra heads and every loss are left out). The
compiler's fused forms are undone (`linear_relu` is a linear with relu true; `rope_attention` an attention with
rotate true). A prior switched off by --prior-off-at at the checkpoint's step is exported as the zeros it
gives from then on; the calculator prior, which parses the text, has no export (ExportError).

The ops of a step, each over (batch, T, width) values:
- embedding (table); linear (w, b where it has one; relu); layer_norm (gamma, beta; eps); relu; gelu (tanh
  form); add (any number, in order); mul; scale (by); concat; split (widths); narrow (keep, width);
- rope (heads: the widths); attention (heads, mask causal/gap/full/anticausal, gap, rotate);
- prefix_mean; zeros (width); counter (table, one row per position); bigram and trigram (table; vocab);
- router (ids, and the stream for kind global; kind global/context/gated, experts, epsilon; w, b, emb, gate_w,
  gate_b); mix (weights, logits...).
"""

from __future__ import annotations

from microgpt.backends.constants import LN_EPS
from microgpt.core.errors import ConfigError, Named
from microgpt.model.graph.ops.attention import head_widths
from microgpt.model.graph.ops.ensemble import until_step

PLAN_FORMAT = 1


class ExportError(ConfigError):
    """A model, or a part of one, that an exporter cannot express; the message says which and why."""


def make_plan(program, names: dict[str, str], specs: dict, step: int) -> dict:
    """The plan of `program`'s logits: graph parameter names mapped to the checkpoint's by `names`, each
    weight's shape, decay and trainable from `specs` (checkpoint name -> the family's ParamSpec), a prior's
    until_step decided at optimiser step `step` (as the model decides it after training)."""
    values = {program.tokens: "ids"}
    steps, used = [], {}
    for index in _needed(program):
        node = program.nodes[index]
        for vid in node.outputs.values():
            values[vid] = f"v{vid}"
        op, params, weights = _translate(node, step)
        steps.append({"op": op, "inputs": [values[v] for v in _read(node)],
                      "outputs": [values[v] for v in node.outputs.values()], "params": params,
                      "weights": {role: names[graph_name] for role, graph_name in weights.items()}})
        for graph_name in weights.values():
            spec = specs[names[graph_name]]
            used[spec.name] = {"shape": list(spec.shape), "decay": spec.decay, "trainable": spec.trainable}
    return {"format": PLAN_FORMAT, "vocab": program.dims["vocab"], "seq_len": program.dims["T"], "ids": "ids",
            "logits": values[program.logits], "weights": used, "steps": steps}


def _read(node) -> list[int]:
    """The value ids a node reads: its inputs, less the stream a context or gated router is given and ignores
    (so the weights that only feed it, the last expert's write, are not exported: nothing reads them)."""
    if node.op.name == "router" and node.params["kind"] != "global":
        return node.inputs["ids"]
    return node.input_ids()


def _needed(program) -> list[int]:
    """Indices of the nodes the logits read (through `_read`), in forward order."""
    producer = {vid: i for i, n in enumerate(program.nodes) for vid in n.outputs.values()}
    wanted, stack = set(), [program.logits]
    while stack:
        i = producer.get(stack.pop())
        if i is not None and i not in wanted:
            wanted.add(i)
            stack.extend(_read(program.nodes[i]))
    return sorted(wanted)


def _translate(node, step: int) -> tuple[str, dict, dict[str, str]]:
    """(plan op, its params, role -> graph parameter name) of one compiled node."""
    name, kind, params = node.name, node.op.name, node.params
    width = node.types["out"].width if "out" in node.types else None
    if kind == "embedding":
        return "embedding", {"width": width}, {"table": name}
    if kind in ("linear", "logits", "stream_read", "stream_write", "linear_relu"):
        weights = {"w": f"{name}.w"}
        if kind == "linear_relu" or params["bias"]:
            weights["b"] = f"{name}.b"
        return "linear", {"relu": kind == "linear_relu"}, weights
    if kind == "layer_norm":
        return "layer_norm", {"eps": LN_EPS}, {"gamma": f"{name}.gamma", "beta": f"{name}.beta"}
    if kind in ("relu", "gelu", "add", "mul", "concat", "prefix_mean"):
        return kind, {}, {}
    if kind == "scale":
        return "scale", {"by": float(params["by"])}, {}
    if kind == "split":
        return "split", {"widths": list(params["widths"])}, {}
    if kind == "narrow":
        return "narrow", {"keep": params["keep"], "width": width}, {}
    if kind == "zeros":
        return "zeros", {"width": width}, {}
    if kind == "rope":
        return "rope", {"heads": list(head_widths(params, width))}, {}
    if kind in ("attention", "rope_attention"):
        return "attention", {"heads": list(head_widths(params, node.in_types["q"][0].width)), "mask": params["mask"],
                             "gap": params["gap"], "rotate": kind == "rope_attention"}, {}
    if kind == "prior":
        return _prior(node, step)
    if kind == "router":
        roles = {"w": "w", "b": "b", "emb": "emb", "gate_w": "gate.w", "gate_b": "gate.b"}
        have = {spec.name for spec in node.op.param_specs(node)}
        return ("router", {"kind": params["kind"], "experts": params["experts"], "epsilon": float(params["epsilon"])},
                {role: f"{name}.{short}" for role, short in roles.items() if f"{name}.{short}" in have})
    if kind == "mix":
        return "mix", {}, {}
    raise ExportError(f"{node.where}: the primitive {kind!r} has no export")


def _prior(node, step: int) -> tuple[str, dict, dict[str, str]]:
    kind, width = node.params["kind"], node.types["out"].width
    until = until_step(node.params)
    if until is not None and step + 1 >= until:  # switched off for good (the prior kernel's `on`)
        return "zeros", {"width": width}, {}
    if kind == "calculator":
        raise ExportError(f"{node.where}: the calculator prior parses the text (X + Y = Z) as it goes, which no "
                          "ONNX or torch graph of tensor operations expresses; it has no export (train without ",
                          Named("prior", "calculator"), ", or with ", Named("prior_off_at"), ", to export the model)")
    if kind == "counter":
        return "counter", {"width": width}, {"table": node.name}
    return kind, {"vocab": node.dims["vocab"]}, {"table": node.name}
