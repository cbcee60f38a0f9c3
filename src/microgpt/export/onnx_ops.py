"""Each plan op (export_plan.py) as ONNX nodes, over values [batch, T, width] float32 and ids [batch, T] int64.

The arithmetic is the kernels' own: LayerNorm with the biased variance and eps 1e-5; GELU's tanh form; RoPE
(opset 23's RotaryEmbedding, interleaved) turning each head's pairs of columns (x0 c - x1 s, x1 c + x0 s) by
the angles of model/rope.py, computed in float64 (position x 10000^(-2i/w)), an odd last column left as it
is; attention (opset 23's Attention) per group of adjacent equal-width heads, softmax(q k^T / sqrt(w) + mask)
v, a hidden key's score -1e9 (the backends' MASKED_SCORE); the router on the mean of the stream so far, a
running sum of embeddings, or the gated running sum as an ONNX Scan over positions; mix sum_k weights[:, k]
* logits_k in expert order.

With a KV cache (`Emitter.cache`), every attention's keys and values of each head group join the past ones
it is given (inside Attention), and the last seq_len - 1 of them come out for the next call: a query sees its
own position and the seq_len - 1 before it, as microgpt's decoder slides its cache (model/kv_cache.py).
"""

from __future__ import annotations

import math

import numpy as np

from microgpt.backends.constants import MASKED_SCORE
from microgpt.export.onnx_graph import DOUBLE, FLOAT, Builder, Dims
from microgpt.model.attention import head_groups
from microgpt.model.graph.ops.basic import GELU_C
from microgpt.model.rope import ROPE_BASE


class Emitter:
    """The ONNX nodes of a plan's steps, one method per op, sharing the RoPE tables and masks they make."""

    def __init__(self, builder: Builder, dims: Dims, weights: dict[str, np.ndarray], seq_len: int,
                 cache: bool = False):
        self.b, self.dims, self.weights, self.seq_len, self.cache = builder, dims, weights, seq_len, cache
        self.caches: list[dict] = []  # per attention node and head group (cache only): its inputs and outputs
        self._tables: dict[int, tuple[str, str]] = {}
        self._masks: dict[tuple, str] = {}
        self._counts: str | None = None
        self._span: tuple | None = None
        self._made: set[str] = set()  # the weights already given as initializers (a weight read twice)

    def emit(self, step: dict, inputs: list[str]) -> list[str]:
        weights = {role: self.b.weight(name, self.weights[name]) if name not in self._made else name
                   for role, name in step["weights"].items()}
        self._made.update(step["weights"].values())
        out = getattr(self, f"op_{step['op']}")(inputs, step["params"], weights)
        return out if isinstance(out, list) else [out]

    # ---- position-wise ------------------------------------------------------------------------------

    def op_embedding(self, inputs, params, w):
        return self.b.op("Gather", [w["table"], inputs[0]], axis=0)  # [B, T, width]

    def op_linear(self, inputs, params, w):
        y = self.b.op("MatMul", [inputs[0], w["w"]])  # [B, T, d_out]
        if "b" in w:
            y = self.b.op("Add", [y, w["b"]])
        return self.b.op("Relu", [y]) if params["relu"] else y

    def op_layer_norm(self, inputs, params, w):
        return self.b.op("LayerNormalization", [inputs[0], w["gamma"], w["beta"]], axis=-1, epsilon=params["eps"])

    def op_relu(self, inputs, params, w):
        return self.b.op("Relu", inputs)

    def op_gelu(self, inputs, params, w):
        b, (x,) = self.b, inputs
        cubic = b.op("Mul", [b.op("Mul", [b.op("Mul", [b.scalar(0.044715), x]), x]), x])  # 0.044715 x^3
        inner = b.op("Tanh", [b.op("Mul", [b.scalar(GELU_C), b.op("Add", [x, cubic])])])
        return b.op("Mul", [b.op("Mul", [b.scalar(0.5), x]), b.op("Add", [b.scalar(1.0), inner])])

    def op_add(self, inputs, params, w):
        total = inputs[0]
        for x in inputs[1:]:
            total = self.b.op("Add", [total, x])
        return self.b.op("Identity", [total]) if len(inputs) == 1 else total

    def op_mul(self, inputs, params, w):
        return self.b.op("Mul", inputs)

    def op_scale(self, inputs, params, w):
        return self.b.op("Mul", [inputs[0], self.b.scalar(params["by"])])

    def op_concat(self, inputs, params, w):
        return self.b.op("Concat", inputs, axis=-1)

    def op_split(self, inputs, params, w):
        return self.b.op("Split", [inputs[0], self.b.ints(*params["widths"])], outputs=len(params["widths"]), axis=-1)

    def op_narrow(self, inputs, params, w):
        keep = np.arange(params["width"]) < params["keep"]  # [width]
        return self.b.op("Where", [self.b.const(keep, np.bool_), inputs[0], self.b.scalar(0.0)])

    def op_zeros(self, inputs, params, w):
        return self.b.op("ConstantOfShape", [self.dims.shape(self.b, params["width"])],
                         value=self.b.onnx.helper.make_tensor("zero", FLOAT, [1], [0.0]))  # [B, T, width]

    # ---- RoPE and attention ---------------------------------------------------------------------------

    def tables(self, width: int) -> tuple[str, str]:
        """(cos, sin) [B, T, width // 2] float32: pair i of a row at position p turns by p / 10000^(2i/width), the
        angles in float64 as model/rope.py computes them."""
        if width not in self._tables:
            b, pairs = self.b, width // 2
            inv_freq = ROPE_BASE ** (-2.0 * np.arange(pairs) / width)  # [pairs]
            positions = b.op("Unsqueeze", [b.op("Cast", [self.dims.positions], to=DOUBLE), b.ints(1)])  # [T, 1]
            angles = b.op("Mul", [positions, b.const(inv_freq, np.float64)])  # [T, pairs]
            shape = self.dims.shape(b, pairs)  # [B, T, pairs]
            self._tables[width] = tuple(b.op("Expand", [b.op("Cast", [b.op(kind, [angles])], to=FLOAT), shape])
                                        for kind in ("Cos", "Sin"))
        return self._tables[width]

    def rotate(self, x: str, g) -> str:
        """x [B, T, G*w], a head group's columns, each head's pairs (2i, 2i + 1) turned by the row's position
        (RotaryEmbedding, interleaved); an odd last column stays as it is."""
        if g.width < 2:
            return x  # a head of one column has no pair to turn
        cos, sin = self.tables(g.width)
        extra = {"rotary_embedding_dim": g.width - 1} if g.width % 2 else {}
        return self.b.op("RotaryEmbedding", [x, cos, sin], interleaved=1, num_heads=g.count, **extra)

    def columns(self, x: str, g, width: int) -> str:
        """A head group's columns [B, T, G*w] of x [B, T, width] (x itself where the group is all of them)."""
        if g.col == 0 and g.end == width:
            return x
        return self.b.op("Slice", [x, self.b.ints(g.col), self.b.ints(g.end), self.b.ints(2)])

    def op_rope(self, inputs, params, w):
        width = sum(params["heads"])
        parts = [self.rotate(self.columns(inputs[0], g, width), g) for g in head_groups(tuple(params["heads"]))]
        return parts[0] if len(parts) == 1 else self.b.op("Concat", parts, axis=-1)

    def mask(self, kind: str, gap: int) -> str | None:
        """The additive mask [T, keys] (0 where a key is seen, -1e9 where hidden), None for `full`. With a
        cache the keys are the past ones and these (query i is at past + i), and a query sees seq_len of them."""
        key = (kind, gap)
        if key not in self._masks:
            b, dims = self.b, self.dims
            zero, one = b.const(0, np.int64), b.const(1, np.int64)
            queries = b.op("Range", [zero, dims.t_scalar, one])  # [T]
            total = dims.t_scalar if not self.cache else self.span()[1]
            if self.cache:
                queries = b.op("Add", [queries, self.span()[0]])
            key_index = b.op("Range", [zero, total, one])  # [keys]
            after = b.op("Sub", [b.op("Unsqueeze", [key_index, b.ints(0)]),
                                 b.op("Unsqueeze", [queries, b.ints(1)])])  # [T, keys]: key j's distance after i
            if kind == "full":
                seen = None
            elif kind == "causal":
                seen = b.op("LessOrEqual", [after, zero])
                if self.cache:  # the window: the seq_len - 1 positions before a query, and itself
                    seen = b.op("And", [seen, b.op("Greater", [after, b.const(-self.seq_len, np.int64)])])
            elif kind == "gap":
                seen = b.op("Or", [b.op("LessOrEqual", [after, zero]),
                                   b.op("GreaterOrEqual", [after, b.const(gap + 1, np.int64)])])
            else:  # anticausal
                seen = b.op("GreaterOrEqual", [after, zero])
            self._masks[key] = None if seen is None else b.op("Where", [seen, b.scalar(0.0), b.scalar(MASKED_SCORE)])
        return self._masks[key]

    def op_attention(self, inputs, params, w):
        b, width = self.b, sum(params["heads"])
        outs = []
        for g in head_groups(tuple(params["heads"])):
            q, k, v = (self.columns(x, g, width) for x in inputs)  # each [B, T, G*w]
            if params["rotate"]:
                q, k = self.rotate(q, g), self.rotate(k, g)
            past = self.past(g) if self.cache else []
            mask = self.mask(params["mask"], params["gap"])
            wiring = [q, k, v, mask or "", *past]
            while wiring[-1] == "":
                wiring.pop()
            made = b.op("Attention", wiring, outputs=3 if past else 1, q_num_heads=g.count, kv_num_heads=g.count,
                        scale=1.0 / math.sqrt(g.width))  # [B, T, G*w] (and the keys and values so far)
            if past:
                made = self.present(made, len(self.caches) - 1)
            outs.append(made)
        return outs[0] if len(outs) == 1 else b.op("Concat", outs, axis=-1)

    def past(self, g) -> list[str]:
        """The past keys and values [B, G, past, w] of the next cache (an input pair of the graph)."""
        b, n = self.b, len(self.caches)
        self.caches.append({"heads": g.count, "width": g.width})
        return [b.add_input(f"past_{kind}.{n}", FLOAT, ["batch", g.count, "past", g.width]) for kind in ("key", "value")]

    def span(self) -> tuple[str, str, str]:
        """(past keys [], past + T [], where the present starts [1]), the same for every cache: read from the
        first one's past keys."""
        if self._span is None:
            b = self.b
            past = b.op("Squeeze", [b.op("Slice", [b.op("Shape", ["past_key.0"]), b.ints(2), b.ints(3)]), b.ints(0)])
            total = b.op("Add", [past, self.dims.t_scalar])
            first = b.op("Max", [b.op("Sub", [b.op("Unsqueeze", [total, b.ints(0)]), b.ints(self.seq_len - 1)]),
                                 b.ints(0)])  # [1]: the last seq_len - 1 keys go on
            self._span = (past, total, first)
        return self._span

    def present(self, made: list[str], n: int) -> str:
        """The attention's output, its keys and values so far cropped to their last seq_len - 1 as the graph's
        present_key.n and present_value.n."""
        b, (out, keys, values) = self.b, made
        first, end = self.span()[2], b.ints(np.iinfo(np.int64).max)
        for kind, every in (("key", keys), ("value", values)):
            b.op("Slice", [every, first, end, b.ints(2)], name=f"present_{kind}.{n}")
            b.add_output(f"present_{kind}.{n}", FLOAT, ["batch", self.caches[n]["heads"], "present",
                                                        self.caches[n]["width"]])
        return out

    # ---- the rest: prefix means, priors, routers, mixing ----------------------------------------------

    def counts(self) -> str:
        """[T, 1] float32: 1, 2, ..., T (a prefix mean's divisors)."""
        if self._counts is None:
            b = self.b
            one = b.const(1, np.int64)
            ranks = b.op("Range", [one, b.op("Add", [self.dims.t_scalar, one]), one])  # [T]
            self._counts = b.op("Unsqueeze", [b.op("Cast", [ranks], to=FLOAT), b.ints(1)])
        return self._counts

    def prefix_mean(self, x: str) -> str:
        return self.b.op("Div", [self.b.op("CumSum", [x, self.b.const(1, np.int64)]), self.counts()])

    def op_prefix_mean(self, inputs, params, w):
        return self.prefix_mean(inputs[0])

    def op_counter(self, inputs, params, w):
        rows = self.b.op("Gather", [w["table"], self.dims.positions], axis=0)  # [T, width]
        return self.b.op("Expand", [rows, self.dims.shape(self.b, params["width"])])  # [B, T, width]

    def op_bigram(self, inputs, params, w):
        return self.b.op("Gather", [w["table"], inputs[0]], axis=0)  # [B, T, vocab]

    def op_trigram(self, inputs, params, w):
        b, (ids,) = self.b, inputs
        start = b.op("ConstantOfShape", [b.op("Concat", [self.dims.batch, b.ints(1)], axis=0)],
                     value=b.onnx.helper.make_tensor("start", 7, [1], [params["vocab"]]))  # [B, 1]: no token before
        before = b.op("Concat", [start, b.op("Slice", [ids, b.ints(0), b.ints(-1), b.ints(1)])], axis=1)  # [B, T]
        pairs = b.op("Add", [b.op("Mul", [before, b.const(params["vocab"], np.int64)]), ids])  # [B, T]
        return b.op("Gather", [w["table"], pairs], axis=0)  # [B, T, vocab]

    def op_router(self, inputs, params, w):
        b, ids = self.b, inputs[0]
        if params["kind"] == "global":
            feature = self.prefix_mean(inputs[1])  # [B, T, width]: the mean of the stream so far
        else:
            embedded = b.op("Gather", [w["emb"], ids], axis=0)  # [B, T, width]
            feature = (b.op("CumSum", [embedded, b.const(1, np.int64)]) if params["kind"] == "context"
                       else self.gated_sum(embedded, w))
        p = b.op("Softmax", [b.op("Add", [b.op("MatMul", [feature, w["w"]]), w["b"]])], axis=-1)  # [B, T, n]
        epsilon = params["epsilon"]
        return b.op("Add", [b.op("Mul", [b.scalar(1 - epsilon), p]), b.scalar(epsilon / params["experts"])])

    def gated_sum(self, embedded: str, w) -> str:
        """f[t] = gate[t] f[t - 1] + e[t] (f[0] = e[0]), gate = sigmoid(e @ gate_w + gate_b): a Scan over T."""
        b, helper = self.b, self.b.onnx.helper
        width = self.weights[w["emb"]].shape[1]
        logit = b.op("Add", [b.op("MatMul", [embedded, w["gate_w"]]), w["gate_b"]])  # [B, T]
        gate = b.op("Unsqueeze", [b.op("Sigmoid", [logit]), b.ints(2)])  # [B, T, 1]
        zero = b.op("ConstantOfShape", [b.op("Concat", [self.dims.batch, b.ints(width)], axis=0)],
                    value=helper.make_tensor("zero", FLOAT, [1], [0.0]))  # [B, width]
        body = helper.make_graph(
            [helper.make_node("Mul", ["gate_t", "state"], ["kept"]),
             helper.make_node("Add", ["kept", "embedded_t"], ["next"]),
             helper.make_node("Identity", ["next"], ["feature_t"])],
            "gated_sum",
            [helper.make_tensor_value_info("state", FLOAT, ["batch", width]),
             helper.make_tensor_value_info("gate_t", FLOAT, ["batch", 1]),
             helper.make_tensor_value_info("embedded_t", FLOAT, ["batch", width])],
            [helper.make_tensor_value_info("next", FLOAT, ["batch", width]),
             helper.make_tensor_value_info("feature_t", FLOAT, ["batch", width])])
        _, feature = b.op("Scan", [zero, gate, embedded], outputs=2, body=body, num_scan_inputs=2,
                          scan_input_axes=[1, 1], scan_output_axes=[1])
        return feature  # [B, T, width]

    def op_mix(self, inputs, params, w):
        b, (weights, *logits) = self.b, inputs
        total = None
        for k, expert in enumerate(logits):
            share = b.op("Mul", [expert, b.op("Slice", [weights, b.ints(k), b.ints(k + 1), b.ints(2)])])
            total = share if total is None else b.op("Add", [total, share])
        return total  # [B, T, vocab]

