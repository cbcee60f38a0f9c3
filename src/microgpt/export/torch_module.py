"""A microgpt model as a self-contained torch.nn.Module: `ExportedModel(plan)`, and `save` / `load` of model.pt.

This file needs only PyTorch (it imports nothing of microgpt), so it can be copied next to a training script
and used without microgpt installed. A plan (microgpt/export/export_plan.py) lists the model's steps from token ids
to logits; the module runs them with PyTorch's ops, so autograd trains it and torch.compile compiles it:

    from microgpt.export.torch_module import load
    model = load("model.pt")                      # torch.load(weights_only=True) + the plan + the state dict
    logits = model(ids)                           # ids (batch, T) int64, T <= model.seq_len -> (batch, T, vocab)
    optimizer = torch.optim.AdamW(model.param_groups(weight_decay=0.1), lr=1e-3, betas=(0.9, 0.95))

The weights are parameters named as in the checkpoint (`blocks.0.attn.wq.w`, with w (d_in, d_out): y = x @ w
+ b), nested modules by their dotted names; the frozen ones (an n-gram prior's tables) do not require grad.
The arithmetic is microgpt's: LayerNorm with eps 1e-5; GELU's tanh form; RoPE turning each head's pairs of
columns by position / 10000^(2i/w) (an odd last column left as it is); attention per run of equal-width heads,
a hidden key's score set to -1e9; the ensemble's priors, routers and mixing as its kernels compute them.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

FORMAT = "microgpt-torch"  # the "format" of a model.pt
FORMAT_VERSION = 1  # its "version"
PLAN_FORMAT = 1  # the plans this module runs (microgpt/export/export_plan.py's PLAN_FORMAT)
MASKED_SCORE = -1e9
ROPE_BASE = 10000.0
GELU_C = math.sqrt(2.0 / math.pi)


def head_groups(widths: list[int]) -> list[tuple[int, int, int]]:
    """(first column, heads, width) of each run of adjacent heads of one width."""
    groups: list[tuple[int, int, int]] = []
    col = 0
    for width in widths:
        if groups and groups[-1][2] == width:
            groups[-1] = (groups[-1][0], groups[-1][1] + 1, width)
        else:
            groups.append((col, 1, width))
        col += width
    return groups


def rope_tables(width: int, positions: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin), each (positions, width // 2) float64: pair i of a head turns by position / 10000^(2i/width)."""
    inv_freq = ROPE_BASE ** (-2.0 * torch.arange(width // 2, dtype=torch.float64) / width)  # (pairs,)
    angles = torch.arange(positions, dtype=torch.float64)[:, None] * inv_freq[None, :]  # (positions, pairs)
    return torch.cos(angles), torch.sin(angles)


class Holder(nn.Module):
    """A level of the dotted weight names (`blocks`, `blocks.0`, ...)."""


class ExportedModel(nn.Module):
    """A plan's steps as one module: forward(ids (batch, T)) -> logits (batch, T, vocab), T from 1 to seq_len
    (ValueError past it, as microgpt's own logits refuse: the model saw no longer window)."""

    def __init__(self, plan: dict, info: dict | None = None):
        super().__init__()
        if plan.get("format") != PLAN_FORMAT:
            raise ValueError(f"this plan is of format {plan.get('format')!r}; this module runs format {PLAN_FORMAT}")
        self.plan, self.info = plan, dict(info or {})
        self.vocab_size, self.seq_len = plan["vocab"], plan["seq_len"]
        self.paths = {name: self._register(name, nn.Parameter(torch.zeros(spec["shape"]),
                                                               requires_grad=spec["trainable"]))
                      for name, spec in plan["weights"].items()}
        self.tables_name = "rope"  # the RoPE tables' module, named apart from every weight
        while hasattr(self, self.tables_name):
            self.tables_name += "_"
        tables = Holder()
        widths = {g[2] for step in plan["steps"] if step["op"] in ("rope", "attention")
                  for g in head_groups(step["params"]["heads"])}
        for width in sorted(widths):
            cos, sin = rope_tables(width, self.seq_len)  # float64, cast to the input's dtype when read
            tables.register_buffer(f"cos{width}", cos, persistent=False)
            tables.register_buffer(f"sin{width}", sin, persistent=False)
        self.add_module(self.tables_name, tables)

    def _register(self, name: str, parameter: nn.Parameter) -> str:
        """Register a weight under its dotted name, each level a Holder; the path it got (a level whose name
        an nn.Module attribute already has gets a trailing _)."""
        owner, path = self, []
        parts = name.split(".")
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            while (part not in owner._modules or last) and (hasattr(owner, part) or part in owner._modules):
                part += "_"
            if last:
                owner.register_parameter(part, parameter)
            elif part not in owner._modules:
                owner.add_module(part, Holder())
            path.append(part)
            owner = owner if last else owner._modules[part]
        return ".".join(path)

    def param_groups(self, weight_decay: float) -> list[dict]:
        """AdamW's groups as microgpt decays: `weight_decay` on the weights whose plan says decay (the
        matrices), none on the rest; frozen weights left out."""
        weights = self.plan["weights"]
        chosen = {True: [], False: []}
        for name, path in self.paths.items():
            if weights[name]["trainable"]:
                chosen[weights[name]["decay"]].append(self.get_parameter(path))
        return [{"params": chosen[True], "weight_decay": weight_decay}, {"params": chosen[False], "weight_decay": 0.0}]

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if ids.ndim != 2 or not 1 <= ids.shape[1] <= self.seq_len:
            raise ValueError(f"the model takes ids of shape (batch, T) with 1 <= T <= seq_len {self.seq_len}, got "
                             f"{tuple(ids.shape)}; give at most the last {self.seq_len} tokens")
        values = {self.plan["ids"]: ids}
        for step in self.plan["steps"]:
            weights = {role: self.get_parameter(self.paths[name]) for role, name in step["weights"].items()}
            out = getattr(self, f"op_{step['op']}")([values[v] for v in step["inputs"]], step["params"], weights, ids)
            values.update(zip(step["outputs"], out if isinstance(out, (list, tuple)) else [out]))
        return values[self.plan["logits"]]

    # ---- position-wise ------------------------------------------------------------------------------

    def op_embedding(self, inputs, params, w, ids):
        return F.embedding(inputs[0], w["table"])  # (B, T, width)

    def op_linear(self, inputs, params, w, ids):
        y = inputs[0] @ w["w"]  # (B, T, d_out)
        if "b" in w:
            y = y + w["b"]
        return torch.relu(y) if params["relu"] else y

    def op_layer_norm(self, inputs, params, w, ids):
        return F.layer_norm(inputs[0], w["gamma"].shape, w["gamma"], w["beta"], params["eps"])

    def op_relu(self, inputs, params, w, ids):
        return torch.relu(inputs[0])

    def op_gelu(self, inputs, params, w, ids):
        (x,) = inputs
        inner = torch.tanh(GELU_C * (x + 0.044715 * x * x * x))
        return 0.5 * x * (1.0 + inner)

    def op_add(self, inputs, params, w, ids):
        total = inputs[0]
        for x in inputs[1:]:
            total = total + x
        return total

    def op_mul(self, inputs, params, w, ids):
        return inputs[0] * inputs[1]

    def op_scale(self, inputs, params, w, ids):
        return inputs[0] * params["by"]

    def op_concat(self, inputs, params, w, ids):
        return torch.cat(inputs, dim=-1)

    def op_split(self, inputs, params, w, ids):
        return list(torch.split(inputs[0], params["widths"], dim=-1))

    def op_narrow(self, inputs, params, w, ids):
        (x,) = inputs
        return torch.cat([x[..., : params["keep"]], torch.zeros_like(x[..., params["keep"] :])], dim=-1)

    def op_zeros(self, inputs, params, w, ids):
        return torch.zeros(ids.shape[0], ids.shape[1], params["width"], dtype=self._dtype(), device=ids.device)

    # ---- RoPE and attention ---------------------------------------------------------------------------

    def _rotate(self, x: torch.Tensor, width: int, length: int, heads_axis: bool) -> torch.Tensor:
        """x (..., T, G, width) with heads_axis, else (..., T, width), each row's pairs of columns (x0, x1)
        turned by its position: (x0 c - x1 s, x1 c + x0 s); an odd last column stays as it is."""
        tables = getattr(self, self.tables_name)
        cos = getattr(tables, f"cos{width}")[:length].to(x.dtype)  # (T, pairs)
        sin = getattr(tables, f"sin{width}")[:length].to(x.dtype)
        if heads_axis:
            cos, sin = cos[:, None, :], sin[:, None, :]  # (T, 1, pairs)
        even = width - width % 2
        pairs = x[..., :even].unflatten(-1, (even // 2, 2))  # (..., pairs, 2)
        x0, x1 = pairs[..., 0], pairs[..., 1]
        turned = torch.stack((x0 * cos - x1 * sin, x1 * cos + x0 * sin), dim=-1).flatten(-2)  # (..., even)
        return torch.cat([turned, x[..., even:]], dim=-1) if width % 2 else turned

    def op_rope(self, inputs, params, w, ids):
        (x,) = inputs
        batch, length = x.shape[0], x.shape[1]
        parts = [self._rotate(x[..., col : col + count * width].reshape(batch, length, count, width), width, length,
                              True).reshape(batch, length, count * width)
                 for col, count, width in head_groups(params["heads"])]
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)

    def _seen(self, kind: str, gap: int, length: int, device) -> torch.Tensor | None:
        """(T, T) bool: which keys each query sees under the mask (None: all of them)."""
        positions = torch.arange(length, device=device)
        after = positions[None, :] - positions[:, None]  # (T, T): key j's distance after query i
        if kind == "causal":
            return after <= 0
        if kind == "gap":
            return (after <= 0) | (after >= gap + 1)
        return None if kind == "full" else after >= 0

    def op_attention(self, inputs, params, w, ids):
        q, k, v = inputs  # each (B, T, width)
        batch, length = q.shape[0], q.shape[1]
        seen = self._seen(params["mask"], params["gap"], length, q.device)
        outs = []
        for col, count, width in head_groups(params["heads"]):
            def heads(x, col=col, count=count, width=width):
                return x[..., col : col + count * width].reshape(batch, length, count, width).transpose(1, 2)

            qh, kh, vh = heads(q), heads(k), heads(v)  # each (B, G, T, w)
            if params["rotate"]:
                qh, kh = self._rotate(qh, width, length, False), self._rotate(kh, width, length, False)
            scores = (qh @ kh.transpose(-1, -2)) * (1.0 / math.sqrt(width))  # (B, G, T, T)
            if seen is not None:
                scores = scores.masked_fill(~seen, MASKED_SCORE)
            mixed = torch.softmax(scores, dim=-1) @ vh  # (B, G, T, w)
            outs.append(mixed.transpose(1, 2).reshape(batch, length, count * width))
        return outs[0] if len(outs) == 1 else torch.cat(outs, dim=-1)

    # ---- the rest: prefix means, priors, routers, mixing ----------------------------------------------

    @staticmethod
    def _prefix_mean(x: torch.Tensor) -> torch.Tensor:
        counts = torch.arange(1, x.shape[1] + 1, dtype=x.dtype, device=x.device)[:, None]  # (T, 1)
        return x.cumsum(dim=1) / counts

    def op_prefix_mean(self, inputs, params, w, ids):
        return self._prefix_mean(inputs[0])

    def op_counter(self, inputs, params, w, ids):
        return w["table"][: ids.shape[1]].expand(ids.shape[0], -1, -1)  # (B, T, width)

    def op_bigram(self, inputs, params, w, ids):
        return w["table"][inputs[0]]  # (B, T, vocab)

    def op_trigram(self, inputs, params, w, ids):
        before = torch.cat([torch.full_like(ids[:, :1], params["vocab"]), ids[:, :-1]], dim=1)  # (B, T)
        return w["table"][before * params["vocab"] + ids]  # (B, T, vocab)

    def op_router(self, inputs, params, w, ids):
        if params["kind"] == "global":
            feature = self._prefix_mean(inputs[1])  # (B, T, width): the mean of the stream so far
        elif params["kind"] == "context":
            feature = w["emb"][ids].cumsum(dim=1)
        else:
            embedded = w["emb"][ids]  # (B, T, width)
            gate = torch.sigmoid(embedded @ w["gate_w"] + w["gate_b"])  # (B, T)
            rows = [embedded[:, 0]]
            for t in range(1, ids.shape[1]):
                rows.append(gate[:, t, None] * rows[-1] + embedded[:, t])
            feature = torch.stack(rows, dim=1)
        p = torch.softmax(feature @ w["w"] + w["b"], dim=-1)  # (B, T, experts)
        return (1 - params["epsilon"]) * p + params["epsilon"] / params["experts"]

    def op_mix(self, inputs, params, w, ids):
        weights, *logits = inputs
        total = logits[0] * weights[..., 0:1]
        for k, expert in enumerate(logits[1:], start=1):
            total = total + expert * weights[..., k : k + 1]
        return total  # (B, T, vocab)

    # ---- helpers -----------------------------------------------------------------------------------------

    def _dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype



def save(model: ExportedModel, path, extra: dict | None = None) -> None:
    """model.pt: a dict that torch.load(weights_only=True) reads: the format, the plan, the state dict and
    `info` (family, shape, tokenizer)."""
    torch.save({"format": FORMAT, "version": FORMAT_VERSION, "plan": model.plan, "info": model.info,
                "state_dict": model.state_dict(), **(extra or {})}, path)


def load(path, map_location="cpu") -> ExportedModel:
    """The ExportedModel saved at `path` (by `microgpt export --format torch`)."""
    data = torch.load(path, map_location=map_location, weights_only=True)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{path} is not a model.pt of microgpt export (no format {FORMAT!r})")
    if data.get("version") != FORMAT_VERSION:
        raise ValueError(f"{path} is a model.pt of version {data.get('version')!r}; this module reads "
                         f"{FORMAT_VERSION} (export it again with this microgpt)")
    model = ExportedModel(data["plan"], data.get("info"))
    model.load_state_dict(data["state_dict"])
    return model
